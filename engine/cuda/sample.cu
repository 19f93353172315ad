// The sampling kernel (launch_sample, kernels.cuh): one block per row, the chain of
// sampling/logit_transforms.h (temperature, top-k, top-p, min-p, in that order) or greedy,
// the row's distribution and optionally one inverse-CDF draw; and the children kernel
// (launch_draw_children): one block per draft context, draw_siblings' children of its
// distribution. Kernels of our own, not Thrust: every step is a block-wide count or sum, and a
// sort is never needed.
//
// The rules, each as sampling/ states it:
//   scores       s = x / t (__fdiv_rn, the CPU's float division); a NaN or +inf score, or every
//                score -inf, makes the row invalid (the CPU throws).
//   numerators   e = exp_nonpositive(s - max s), base/exp_shifted.h's polynomial through the
//                round-to-nearest float intrinsics (so nvcc contracts nothing; the CPU build has
//                -ffp-contract=off): bit for bit the CPU's.
//   top-k        keep s >= the k-th largest s. The k-th largest is found by bisection over the
//                scores' order-preserving 32-bit keys (32 block-wide counts), exact.
//   top-p        candidate order is s descending, ties by lower id; keep a token while the mass
//                strictly before it is < p * mass. The boundary score T0 (the smallest score
//                whose first token's mass-before is < limit) is found by bisection over keys
//                (32 block-wide double sums of the candidates above a key); candidates above T0
//                are kept, below dropped, and the tokens tied at T0 are walked in id order.
//   min-p        keep e >= p (the top numerator is 1).
//   probs        e / mass as float (e * (1 / mass) when no token was dropped, as the CPU).
//   greedy       t = 0: one-hot at the first index of the largest logit; NaN or +inf invalid.
//   draw         the smallest token whose prefix sum of probs exceeds u * total (prefix sums in
//                double over per-thread chunks), else the last token of positive mass.
//   children     kDrawSampled: a draw per child; kDrawWithoutReplacement: a draw per child with
//                the earlier children's weights 0 (total: the sum of the weights left, where
//                the CPU's Residual takes the row's sum less the removed ones: the two part
//                where that cancels to less than its rounding), absent once no weight is left;
//                kDrawTopK: the most probable token with q > 0 not yet a child, ties to the
//                lowest id.
// Sums are in double in this kernel's fixed order (per-thread strided partials added by thread
// 0 in thread order), not the CPU's (lane_sum, or list order after a transform lists): a mass
// differs from the CPU's by at most about vocab * 2^-53 relative. So the support equals the
// CPU's except where a top-p mass-before sits within that of p * mass, probabilities are within
// one float rounding of the CPU's (2^-23 relative), and draws equal the CPU's except where
// u * total lies within that of a CDF boundary.
//
// Complexity per row: O(vocab) for temperature, numerators, min-p and the draw; 32 passes of
// O(vocab) for top-k and 34 for top-p; each pass one block reduction. No global scratch: the
// probs row holds the numerators (-1 marks a dropped token) until it is normalised.
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/cuda_draws.cuh"
#include "engine/cuda/kernels.cuh"
#include "engine/device_verify.h"

namespace specula::cuda {
namespace {

constexpr int kSampleThreads = kBlockSlots;  // threads a block has, one BlockShared slot each
constexpr float kDropped = -1.0f;  // in the probs row while it holds numerators: not a candidate

__device__ __forceinline__ float infinity() { return __uint_as_float(0x7f800000u); }
__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7fc00000u); }

// base/exp_shifted.h's exp_nonpositive, operation for operation: e^d for d <= 0 (or -inf).
__device__ float exp_nonpositive(float d) {
  const float kLowest = -103.97f;
  const unsigned bits = __float_as_uint(d), lowest = __float_as_uint(kLowest);
  const unsigned below = 0u - static_cast<unsigned>(bits > lowest);  // all ones where d < kLowest
  const float x = __uint_as_float((bits & ~below) | (lowest & below));
  const float kRound = 12582912.0f;
  const float t = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), kRound);
  const float n = __fsub_rn(t, kRound);
  const float r = __fsub_rn(__fsub_rn(x, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  const float er = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
  const int ni = static_cast<int>(__float_as_uint(t)) - static_cast<int>(__float_as_uint(kRound));
  const int h = ni >> 1;
  const float value = __fmul_rn(__fmul_rn(er, __uint_as_float(static_cast<unsigned>(h + 127) << 23)),
                                __uint_as_float(static_cast<unsigned>(ni - h + 127) << 23));
  return __uint_as_float(__float_as_uint(value) & ~below);
}

// A non-NaN float's order-preserving key: a < b exactly when key(a) < key(b); -0 is +0.
__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

// Thread t's contiguous chunk [begin, end) of the row (chunked passes walk ids in order).
struct Chunk {
  int begin, end;
};
__device__ __forceinline__ Chunk chunk_of(int t, int vocab) {
  const int size = (vocab + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int begin = t * size < vocab ? t * size : vocab;
  return {begin, begin + size < vocab ? begin + size : vocab};
}

// The whole row invalid: NaN probabilities, token -1.
__device__ void write_invalid(float* probs, int vocab, int* token) {
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) probs[v] = quiet_nan();
  if (threadIdx.x == 0 && token != nullptr) *token = -1;
}

// greedy_token: the first index of the largest logit (NaN never larger; all -inf: index 0); a
// NaN or +inf logit makes the row invalid. One-hot probabilities.
__device__ void greedy_row(const float* x, int vocab, float* probs, int* token, BlockShared& sh) {
  float best = -infinity();
  int at = -1, bad = 0;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float value = x[v];
    bad |= !(value < infinity()) ? 1 : 0;  // NaN or +inf
    if (value > best || (at < 0 && value == best)) best = value, at = v;
  }
  const int argmax = block_argmax(best, at, sh);
  if (block_sum(bad, sh) != 0) {
    write_invalid(probs, vocab, token);
    return;
  }
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) probs[v] = v == argmax ? 1.0f : 0.0f;
  if (threadIdx.x == 0 && token != nullptr) *token = argmax;
}

// The candidates' mass with score key > above (above = 0: every candidate), in double.
__device__ double mass_above(const float* x, float t, const float* e, int vocab, unsigned above, BlockShared& sh) {
  double partial = 0.0;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (e[v] >= 0.0f && order_key(__fdiv_rn(x[v], t)) > above) partial = __dadd_rn(partial, static_cast<double>(e[v]));
  return block_sum(partial, sh);
}

// TopK::apply, k < vocab: drops every token whose score is below the k-th largest.
__device__ void top_k(const float* x, float t, float* e, int vocab, int k, BlockShared& sh) {
  unsigned kth = 0;  // the largest key with at least k scores at or above it
  for (int bit = 31; bit >= 0; --bit) {
    const unsigned candidate = kth | (1u << bit);
    int count = 0;
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) count += order_key(__fdiv_rn(x[v], t)) >= candidate ? 1 : 0;
    if (block_sum(count, sh) >= k) kth = candidate;
  }
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (order_key(__fdiv_rn(x[v], t)) < kth) e[v] = kDropped;
}

// TopP::apply: keeps the candidates whose mass before them, in candidate order, is < p * mass.
__device__ void top_p(const float* x, float t, float* e, int vocab, float p, BlockShared& sh) {
  const double limit = __dmul_rn(static_cast<double>(p), mass_above(x, t, e, vocab, 0u, sh));
  // mass_above is non-increasing in the key and mass_above(0) >= limit: below is the largest
  // key whose mass above is >= limit, so the boundary score's key is below + 1.
  unsigned below = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const unsigned candidate = below | (1u << bit);
    if (mass_above(x, t, e, vocab, candidate, sh) >= limit) below = candidate;
  }
  const unsigned boundary = below + 1u;
  const double before = mass_above(x, t, e, vocab, boundary, sh);  // < limit
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (order_key(__fdiv_rn(x[v], t)) < boundary) e[v] = kDropped;
  // The candidates tied at the boundary, in id order: per-thread chunk masses, then thread 0
  // finds the chunk where the running mass reaches the limit; earlier chunks keep their tied
  // tokens, later ones drop them, and that chunk's thread walks it token by token.
  const Chunk mine = chunk_of(threadIdx.x, vocab);
  double tied = 0.0;
  for (int v = mine.begin; v < mine.end; ++v)
    if (e[v] >= 0.0f && order_key(__fdiv_rn(x[v], t)) == boundary) tied = __dadd_rn(tied, static_cast<double>(e[v]));
  sh.d[threadIdx.x] = tied;
  __syncthreads();
  if (threadIdx.x == 0) {
    double running = before;
    int cut = static_cast<int>(blockDim.x);  // none: every tied token kept
    for (int c = 0; c < static_cast<int>(blockDim.x); ++c) {
      const double next = __dadd_rn(running, sh.d[c]);
      if (!(next < limit)) {
        cut = c;
        break;
      }
      running = next;
    }
    sh.i_out = cut;
    sh.d_out = running;  // the mass before the cut chunk (< limit)
  }
  __syncthreads();
  const int cut = sh.i_out;
  if (static_cast<int>(threadIdx.x) < cut) return;
  double running = sh.d_out;
  for (int v = mine.begin; v < mine.end; ++v) {
    if (!(e[v] >= 0.0f) || order_key(__fdiv_rn(x[v], t)) != boundary) continue;
    if (static_cast<int>(threadIdx.x) == cut && running < limit)
      running = __dadd_rn(running, static_cast<double>(e[v]));
    else
      e[v] = kDropped;
  }
}

// The tokens a draw skips (weight 0): `count` ids at `ids` (global memory the block wrote before
// its last barrier); none when count is 0.
struct Removed {
  const int* ids = nullptr;
  int count = 0;
  __device__ bool has(int v) const {
    for (int i = 0; i < count; ++i)
      if (ids[i] == v) return true;
    return false;
  }
};

// inverse_cdf over the finished probs row less `removed` (Residual::sample over a view with
// those tokens removed): thread t sums its chunk in double, thread 0 adds the chunks in order to
// find the one where the prefix exceeds u * total and walks it. -1 when no token has weight.
__device__ void draw(const float* probs, int vocab, double u, Removed removed, int* token, BlockShared& sh) {
  const auto weight = [&](int v) { return removed.has(v) ? 0.0f : probs[v]; };
  const Chunk mine = chunk_of(threadIdx.x, vocab);
  double sum = 0.0;
  for (int v = mine.begin; v < mine.end; ++v) sum = __dadd_rn(sum, static_cast<double>(weight(v)));
  sh.d[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int c = 0; c < static_cast<int>(blockDim.x); ++c) total = __dadd_rn(total, sh.d[c]);
  const double target = __dmul_rn(u, total);
  double cumulative = 0.0;
  int chosen = -1, last_chunk = -1;
  for (int c = 0; c < static_cast<int>(blockDim.x) && chosen < 0; ++c) {
    if (!(sh.d[c] > 0.0)) continue;
    last_chunk = c;
    if (!(__dadd_rn(cumulative, sh.d[c]) > target)) {
      cumulative = __dadd_rn(cumulative, sh.d[c]);
      continue;
    }
    const Chunk walk = chunk_of(c, vocab);  // the prefix crosses here: its first token past target
    for (int v = walk.begin; v < walk.end; ++v) {
      if (!(weight(v) > 0.0f)) continue;
      cumulative = __dadd_rn(cumulative, static_cast<double>(weight(v)));
      chosen = v;
      if (cumulative > target) break;
    }
  }
  if (chosen < 0 && last_chunk >= 0) {  // rounding left none: the last token of positive weight
    const Chunk walk = chunk_of(last_chunk, vocab);
    for (int v = walk.end - 1; v >= walk.begin && chosen < 0; --v)
      if (weight(v) > 0.0f) chosen = v;
  }
  *token = chosen;
}

// The most probable token of the row less `removed` with probability > 0, ties to the lowest
// id; -1 when there is none. Every thread gets it.
__device__ int most_probable(const float* probs, int vocab, Removed removed, BlockShared& sh) {
  float best = 0.0f;
  int at = -1;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (probs[v] > best && !removed.has(v)) best = probs[v], at = v;  // ids ascend: a tie keeps the first
  return block_argmax(best, at, sh);
}

__global__ void sample_kernel(const float* logits, const float* temperature, const int* top_k_of,
                              const float* top_p_of, const float* min_p_of, const double* uniforms, int vocab,
                              float* probs, int* tokens) {
  __shared__ BlockShared sh;
  const int row = blockIdx.x;
  const float* x = logits + static_cast<std::size_t>(row) * vocab;
  float* e = probs + static_cast<std::size_t>(row) * vocab;
  int* token = tokens != nullptr ? tokens + row : nullptr;
  const float t = temperature[row];
  if (!(t > 0.0f)) {
    greedy_row(x, vocab, e, token, sh);
    return;
  }
  // Temperature, and the top score.
  int bad = 0;
  float top = -infinity();
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float s = __fdiv_rn(x[v], t);
    bad |= !(s < infinity()) ? 1 : 0;
    top = s > top ? s : top;
  }
  bad = block_sum(bad, sh);
  top = block_max(top, sh);
  if (bad != 0 || !(top > -infinity())) {
    write_invalid(e, vocab, token);
    return;
  }
  // Every token a candidate, with its numerator.
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) e[v] = exp_nonpositive(__fsub_rn(__fdiv_rn(x[v], t), top));
  const int k = top_k_of[row];
  if (k > 0 && k < vocab) top_k(x, t, e, vocab, k, sh);
  const float p = top_p_of[row];
  if (p < 1.0f) top_p(x, t, e, vocab, p, sh);
  __syncthreads();  // top_p's chunked walk wrote tokens other threads own below
  const float min_p = min_p_of[row];
  if (min_p > 0.0f)
    for (int v = threadIdx.x; v < vocab; v += blockDim.x)
      if (e[v] >= 0.0f && e[v] < min_p) e[v] = kDropped;
  // Normalise: the candidates' mass and count, then e / mass (e * (1 / mass) when every token
  // is a candidate, as chain_distribution does).
  double partial = 0.0;
  int count = 0;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (e[v] >= 0.0f) partial = __dadd_rn(partial, static_cast<double>(e[v])), ++count;
  const double mass = block_sum(partial, sh);
  const bool all = block_sum(count, sh) == vocab;
  const double scale = __ddiv_rn(1.0, mass);
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    const double n = static_cast<double>(e[v]);
    e[v] = !(e[v] >= 0.0f) ? 0.0f : __double2float_rn(all ? __dmul_rn(n, scale) : __ddiv_rn(n, mass));
  }
  if (uniforms == nullptr || token == nullptr) return;
  __syncthreads();  // the draw's chunks read tokens other threads normalised
  draw(e, vocab, uniforms[row], Removed{}, token, sh);
}

// draw_siblings for context blockIdx.x: its children are draws [child_first[c],
// child_first[c + 1]) of `tokens`, in draw order.
__global__ void draw_children_kernel(const float* probs, int vocab, const int* child_first, const int* mode,
                                     const int* source, const double* uniforms, int* tokens) {
  __shared__ BlockShared sh;
  const int c = blockIdx.x;
  const float* q = probs + static_cast<std::size_t>(c) * vocab;
  const int first = child_first[c], count = child_first[c + 1] - first;
  int* out = tokens + first;
  // A context after an absent or refused draw inherits its code; a refused row refuses.
  const int inherited = source != nullptr && source[c] >= 0 && tokens[source[c]] < 0 ? tokens[source[c]] : 0;
  if (inherited < 0 || q[0] != q[0]) {
    for (int j = threadIdx.x; j < count; j += blockDim.x) out[j] = inherited < 0 ? inherited : -1;
    return;
  }
  const int how = mode[c];
  for (int j = 0; j < count; ++j) {
    const Removed removed{out, how == kDrawSampled ? 0 : j};
    if (how == kDrawTopK) {
      const int best = most_probable(q, vocab, removed, sh);
      if (threadIdx.x == 0) out[j] = best < 0 ? kAbsentDraw : best;
    } else {
      draw(q, vocab, uniforms[first + j], removed, &sh.i_out, sh);
      __syncthreads();
      if (threadIdx.x == 0) out[j] = sh.i_out < 0 ? kAbsentDraw : sh.i_out;
    }
    __syncthreads();  // the next child's removed list reads this one
  }
}

}  // namespace

void launch_sample(const float* logits, const float* temperature, const int* top_k, const float* top_p,
                   const float* min_p, const double* uniforms, int rows, int vocab, float* probs, int* tokens,
                   cudaStream_t stream) {
  if (rows == 0) return;
  // A warp per 32 tokens up to kSampleThreads: a small vocabulary leaves no thread idle.
  const int threads = vocab >= kSampleThreads ? kSampleThreads : (vocab + 31) / 32 * 32;
  SPECULA_LAUNCH(sample_kernel, dim3(rows), dim3(threads), 0, stream, logits, temperature, top_k, top_p, min_p,
                 uniforms, vocab, probs, tokens);
  CUDA_CHECK_LAUNCH();
}

void launch_draw_children(const float* probs, int vocab, int contexts, const int* child_first, const int* mode,
                          const int* source, const double* uniforms, int* tokens, cudaStream_t stream) {
  if (contexts == 0) return;
  const int threads = vocab >= kSampleThreads ? kSampleThreads : (vocab + 31) / 32 * 32;
  SPECULA_LAUNCH(draw_children_kernel, dim3(contexts), dim3(threads), 0, stream, probs, vocab, child_first, mode,
                 source, uniforms, tokens);
  CUDA_CHECK_LAUNCH();
}

float* enqueue_round_draws(const DraftUpload& up, int round, bool keep_q, unsigned char* base, float* logits,
                           int vocab, cudaStream_t stream) {
  const std::size_t r = static_cast<std::size_t>(round);
  const int logit = up.first_logit[r], rows = up.first_logit[r + 1] - logit, first_draw = up.first_draw[r];
  const auto floats = [base](std::size_t at) { return reinterpret_cast<float*>(base + at); };
  const auto ints = [base, logit](std::size_t at) { return reinterpret_cast<int*>(base + at) + logit; };
  const auto* uniforms = reinterpret_cast<const double*>(base + up.at.uniforms);
  int* drawn = reinterpret_cast<int*>(base + up.at.tokens);
  float* probs = floats(up.at.probs) + static_cast<std::size_t>(up.probs_row(round, keep_q)) * static_cast<std::size_t>(vocab);
  const double* row_uniforms = up.children ? nullptr : uniforms + first_draw;
  if (up.controls) {
    LogitEditArgs e;
    e.rows = rows;
    e.vocab = vocab;
    e.base = base;
    e.edit_rows = reinterpret_cast<const PathEditRow*>(base + up.at.edit_rows) + logit;
    e.tokens = drawn;
    e.logits = logits;
    launch_edit_logits(e, stream);
  }
  launch_sample(logits, floats(up.at.temperature) + logit, ints(up.at.top_k), floats(up.at.top_p) + logit,
                floats(up.at.min_p) + logit, row_uniforms, rows, vocab, probs, up.children ? nullptr : drawn + first_draw,
                stream);
  if (up.children)
    launch_draw_children(probs, vocab, rows, ints(up.at.child_first), ints(up.at.child_modes), ints(up.at.sources),
                         uniforms, drawn, stream);
  return probs;
}

}  // namespace specula::cuda
