// The log-probability kernel (launch_emitted_logprobs, kernels.cuh): after a step's
// verification, each emitted token's log-probability and its most probable alternatives, as
// sampling/token_logprob.cpp's token_logprob computes them from one row:
//   raw        x - (max + log sum exp(x - max)): the max exact, the sum in double over
//              per-thread strided partials added by thread 0 in thread order (the CPU's is in
//              token order: the two differ by about vocab * 2^-53 relative), exp and log in
//              double;
//   processed  log(double(p)) of the sampling kernel's p, -inf outside its support;
//   top        n rounds of a block-wide argmax over the row's values not yet taken (ties to the
//              lower id); a processed row's stop at its support.
// One block per context slot; each row is read n + 2 times, n <= kMaxDeviceLogprobs.
#include <cmath>

#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernels.cuh"
#include "engine/device_verify.h"

namespace specula::cuda {
namespace {

constexpr int kThreads = kBlockSlots;

struct Shared {
  BlockShared reduce;
  int taken[kMaxDeviceLogprobs];  // the alternatives so far
};

// The largest entry of `row` not among taken[0, n), the lower id among equals; -1 when none is
// left (or every one left is NaN).
__device__ int best_untaken(const float* row, int vocab, int n, Shared& sh) {
  float best = 0;
  int at = -1;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    bool taken = false;
    for (int j = 0; j < n; ++j) taken = taken || sh.taken[j] == v;
    if (!taken && (at < 0 || row[v] > best)) best = row[v], at = v;
  }
  return block_argmax(best, at, sh.reduce);
}

__global__ void emitted_logprobs_kernel(LogprobArgs a) {
  __shared__ Shared sh;
  const int c = blockIdx.x;
  const int s = a.sequence[c];
  const int source = a.source[s];
  if (source < 0) return;
  const int first_context = a.first[3 * s], first_node = a.first[3 * s + 1], first_logit = a.first[3 * s + 2];
  const int k = c - first_context;
  const int count = a.counts[s];
  if (k > count || count < 0) return;
  const int context = k == 0 ? 0 : a.accepted[first_node + k - 1] + 1;
  const int token = a.emitted[first_context + k];
  if (token < 0 || token >= a.vocab) return;  // no token was drawn: the host refuses the verdict
  const std::size_t v = static_cast<std::size_t>(a.vocab);
  const float* row = source == kLogprobRaw ? a.logits + static_cast<std::size_t>(first_logit + context) * v
                                           : a.probs + static_cast<std::size_t>(first_context + context) * v;
  double offset = 0;
  if (source == kLogprobRaw) {
    float local_max = -INFINITY;
    for (int i = threadIdx.x; i < a.vocab; i += blockDim.x) local_max = fmaxf(local_max, row[i]);
    const float max = block_max(local_max, sh.reduce);
    double partial = 0;
    for (int i = threadIdx.x; i < a.vocab; i += blockDim.x) partial += exp(double(row[i]) - double(max));
    offset = double(max) + log(block_sum(partial, sh.reduce));
  }
  const auto log_of = [&](int i) {
    const double x = row[i];
    if (source == kLogprobRaw) return x - offset;
    return x > 0 ? log(x) : -INFINITY;
  };
  EmittedLogprob& out = a.out[c];
  if (threadIdx.x == 0) out.logprob = log_of(token);
  const int n = a.top[s] < a.vocab ? a.top[s] : a.vocab;
  bool ended = false;
  for (int j = 0; j < kMaxDeviceLogprobs; ++j) {
    int best = -1;
    if (j < n && !ended) {
      best = best_untaken(row, a.vocab, j, sh);
      if (best >= 0 && source == kLogprobProcessed && !(row[best] > 0)) best = -1;  // outside the support
      ended = best < 0;
    }
    if (threadIdx.x == 0) {
      sh.taken[j] = best;
      out.top_token[j] = best;
      out.top_logprob[j] = best >= 0 ? log_of(best) : -INFINITY;
    }
    __syncthreads();
  }
}

}  // namespace

void launch_emitted_logprobs(const LogprobArgs& args, cudaStream_t stream) {
  if (args.contexts == 0) return;
  SPECULA_LAUNCH(emitted_logprobs_kernel, dim3(args.contexts), dim3(kThreads), 0, stream, args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specula::cuda
