// defines: matmul_weights, the CPU matrix product y = x W^T against a checkpoint weight in
// its stored dtype (F32, F16 or BF16; upcast to f32 in registers, f32 accumulation).
//
// Batch invariance: every output element y[r][o] is reduced in one fixed order (8-lane
// FMA accumulator over k, then a fixed horizontal sum), whatever the number of rows, the
// tiling or the thread count. A row of a verify pass is therefore bit-identical to the
// same row computed alone in a one-token decode, which greedy speculative decoding needs.
#pragma once

#include "engine/safetensors.h"

namespace specula::cpu {

// y[n, out] = x[n, in] * W[out, in]^T.
//   x: in  [n, in]   f32, row-major
//   w: in  [out, in] checkpoint tensor (any supported dtype; may be unaligned)
//   y: out [n, out]  f32, row-major
void matmul_weights(const float* x, const TensorView& w, float* y, int n);

// The plain reference: the same product with a scalar double-precision loop (tests only).
void matmul_reference(const float* x, const TensorView& w, float* y, int n);

// Row `row` of a weight tensor as f32 (embedding lookup).
void weight_row(const TensorView& w, int64_t row, float* out /* out [cols] */);

}  // namespace specula::cpu
