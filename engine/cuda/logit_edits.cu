// The logit-edit kernel (launch_edit_logits, kernels.cuh): the logit controls
// (sampling/logit_controls.h) on the device, one PathEditRow a row: TokenEdit lists the host
// builds over the row's history (and, where the host knows it, its path), merged with the
// tokens of a path the device drew. Each edit is sampling/'s edited_logit operation for
// operation through the round-to-nearest intrinsics (so nvcc contracts nothing; the CPU build
// has -ffp-contract=off):
//   masked     -inf
//   repeated   x * r where x < 0, else x / r
//   count > 0  x - (frequency * count + presence)
//   biased     x + bias
// so each edited logit is the CPU's bit for bit. One block per row: the edits of tokens off the
// path strided over the threads (their tokens are distinct); each distinct path token by the
// thread of its first occurrence, its edit (or a new one) made repeated and counted there; then,
// once both are written, the EOS ids' -inf while the path is shorter than eos_until.
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

constexpr int kThreads = 128;

// x after `e` under repetition penalty r and the frequency and presence penalties.
__device__ float edited(const TokenEdit& e, float x, float r, float frequency, float presence) {
  if (e.masked) return -INFINITY;
  if (e.repeated) x = x < 0 ? __fmul_rn(x, r) : __fdiv_rn(x, r);
  if (e.count > 0) x = __fsub_rn(x, __fadd_rn(__fmul_rn(frequency, static_cast<float>(e.count)), presence));
  if (e.biased) x = __fadd_rn(x, e.bias);
  return x;
}

__global__ void edit_logits_kernel(LogitEditArgs a) {
  const PathEditRow er = a.edit_rows[blockIdx.x];
  const auto* edits = reinterpret_cast<const TokenEdit*>(a.base + er.edits_at);
  const auto* eos = reinterpret_cast<const int*>(a.base + er.eos_at);
  const auto* path = reinterpret_cast<const int*>(a.base + er.path_at);
  float* row = a.logits + static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(a.vocab);
  const auto on_path = [&](int token, int end) {
    for (int k = 0; k < end; ++k)
      if (a.tokens[path[k]] == token) return true;
    return false;
  };
  for (int k = static_cast<int>(threadIdx.x); k < er.edits; k += blockDim.x) {
    const TokenEdit e = edits[k];
    if (!on_path(e.token, er.path)) row[e.token] = edited(e, row[e.token], er.repetition, er.frequency, er.presence);
  }
  const bool counts = er.frequency != 0.0f || er.presence != 0.0f;
  for (int k = static_cast<int>(threadIdx.x); k < er.path; k += blockDim.x) {
    const int t = a.tokens[path[k]];
    if (t < 0 || t >= a.vocab || on_path(t, k)) continue;
    int lo = 0, hi = er.edits;  // the first edit of a token >= t
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (edits[mid].token < t)
        lo = mid + 1;
      else
        hi = mid;
    }
    TokenEdit e{};
    e.token = t;
    if (lo < er.edits && edits[lo].token == t) e = edits[lo];
    if (er.repetition != 1.0f) e.repeated = true;
    if (counts)
      for (int j = k; j < er.path; ++j) e.count += a.tokens[path[j]] == t ? 1 : 0;
    row[t] = edited(e, row[t], er.repetition, er.frequency, er.presence);
  }
  if (er.path >= er.eos_until) return;
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.x); k < er.eos; k += blockDim.x)
    if (eos[k] >= 0 && eos[k] < a.vocab) row[eos[k]] = -INFINITY;
}

}  // namespace

void launch_edit_logits(const LogitEditArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  SPECULA_LAUNCH(edit_logits_kernel, dim3(args.rows), dim3(kThreads), 0, stream, args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specula::cuda
