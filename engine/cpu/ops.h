// defines: the row-wise CPU operators of the LLaMA forward pass (RMSNorm, RoPE in the
// Hugging Face rotate_half layout, the SiLU-gated MLP activation, residual add); attention is
// in attention.h.
//
// Every operator works on one row at a time with a fixed reduction order, so a row's
// result never depends on the other rows of the batch (batch invariance).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace specula::cpu {

// y = x / sqrt(mean(x^2) + eps) * weight, for each of n rows.
//   x: in [n, dim]; weight: in [dim]; y: out [n, dim] (may alias x)
void rms_norm(const float* x, const float* weight, float eps, float* y, int n, int dim);

// y += bias for each of n rows.  y: in/out [n, dim]; bias: in [dim]
void add_bias(float* y, const float* bias, int n, int dim);

// Rotary tables for one position: cos/sin of position * inv_freq[i], i < head_dim/2, where
// inv_freq = theta^(-2i/head_dim) rescaled by `scaling` (transformers' modeling_rope_utils.py:
// linear divides every frequency by the factor; llama3 divides the low frequencies, keeps the
// high ones and interpolates between, _compute_llama3_parameters).
struct RopeTable {
  RopeTable(int head_dim, float theta, const RopeScaling& scaling);
  const std::vector<float>& inv_freq() const { return inv_freq_; }
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

}  // namespace specula::cpu
