// The logit-edit kernel (launch_edit_logits, kernels.cuh): the logit controls
// (sampling/logit_controls.h) on the device, as lists of TokenEdit the host builds over each
// context's own path. Each edit is sampling/'s edited_logit operation for operation through the
// round-to-nearest intrinsics (so nvcc contracts nothing; the CPU build has -ffp-contract=off):
//   masked     -inf
//   repeated   x * r where x < 0, else x / r
//   count > 0  x - (frequency * count + presence)
//   biased     x + bias
// so each edited logit is the CPU's bit for bit. One block per context, its edits strided over
// the threads (their tokens are distinct).
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void edit_logits_kernel(LogitEditArgs a) {
  const int c = blockIdx.x;
  float* row = a.rows + static_cast<std::size_t>(c) * static_cast<std::size_t>(a.vocab);
  const float r = a.repetition[c], frequency = a.frequency[c], presence = a.presence[c];
  for (int k = a.edit_first[c] + static_cast<int>(threadIdx.x); k < a.edit_first[c + 1]; k += blockDim.x) {
    const TokenEdit e = a.edits[k];
    float x = row[e.token];
    if (e.masked) {
      x = -INFINITY;
    } else {
      if (e.repeated) x = x < 0 ? __fmul_rn(x, r) : __fdiv_rn(x, r);
      if (e.count > 0) x = __fsub_rn(x, __fadd_rn(__fmul_rn(frequency, static_cast<float>(e.count)), presence));
      if (e.biased) x = __fadd_rn(x, e.bias);
    }
    row[e.token] = x;
  }
}

}  // namespace

void launch_edit_logits(const LogitEditArgs& args, cudaStream_t stream) {
  if (args.contexts == 0) return;
  SPECULA_LAUNCH(edit_logits_kernel, dim3(args.contexts), dim3(kThreads), 0, stream, args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specula::cuda
