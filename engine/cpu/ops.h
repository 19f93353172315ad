// defines: the row-wise CPU operators of the LLaMA forward pass (RMSNorm, RoPE in the
// Hugging Face rotate_half layout, the SiLU-gated MLP activation, residual add) and the
// attention of one query row over keys gathered from the paged cache.
//
// Every operator works on one row at a time with a fixed reduction order, so a row's
// result never depends on the other rows of the batch (batch invariance).
#pragma once

#include <cstdint>
#include <vector>


namespace specula::cpu {

// y = x / sqrt(mean(x^2) + eps) * weight, for each of n rows.
//   x: in [n, dim]; weight: in [dim]; y: out [n, dim] (may alias x)
void rms_norm(const float* x, const float* weight, float eps, float* y, int n, int dim);

// Rotary tables for one position: cos/sin of position * theta^(-2i/head_dim), i < head_dim/2.
struct RopeTable {
  RopeTable(int head_dim, float theta);
  // Rotates each head of x in place: x in/out [num_heads, head_dim].
  void apply(float* x, int num_heads, int position) const;

 private:
  int head_dim_;
  std::vector<float> inv_freq_;  // [head_dim / 2], as Hugging Face computes it in f32
};

// gate = silu(gate) * up, elementwise.  gate: in/out [count]; up: in [count]
void silu_mul(float* gate, const float* up, int64_t count);

// x += delta.  x: in/out [count]; delta: in [count]
void add_inplace(float* x, const float* delta, int64_t count);

// Softmax attention of `num_heads` query heads that share one key/value head (grouped-query
// attention) over the same `num_keys` keys. Each head's result is computed in one fixed order
// (keys in groups of four with per-key reductions; the softmax 8 keys at a time with a vector
// exp and a fixed-order sum; the weighted sum in key order), so
// it does not depend on num_heads, on the other heads, or on the batch.
//   q:      in  [num_heads, head_dim] (consecutive heads of one row)
//   keys, values: in, num_keys pointers to cache rows [kv_dim]; the shared head reads
//                 [kv_offset, kv_offset + head_dim) of each, keys in position order
//   scores: scratch [num_heads, num_keys] (ends as the attention weights)
//   out:    out [num_heads, head_dim]
void attend_group(const float* q, int num_heads, const float* const* keys, const float* const* values, int num_keys,
                  int kv_offset, int head_dim, float scale, float* scores, float* out);

}  // namespace specula::cpu
