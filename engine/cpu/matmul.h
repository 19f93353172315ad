// defines: matmul, the CPU matrix product y = x W^T against a checkpoint weight packed at load
// (packed_weights.h) in its stored dtype (F32, F16 or BF16; upcast to f32 in registers, f32
// accumulation), the instruction-set choice behind it, and its plain double-precision
// reference.
//
// Batch invariance: every output element y[r][o] is one FMA chain over k in order, from zero
// (y = fma(x[r][k], w[o][k], y) for k = 0 .. in - 1, in one vector lane), whatever the number
// of rows, the tiling, the k-blocking or the thread count. A row of a verify pass is therefore
// bit-identical to the same row computed alone in a one-token decode, which greedy speculative
// decoding needs. The order does not depend on the vector width either (AVX2 and AVX-512 give
// the same bits), but attention's does, so one process uses one ISA throughout: AVX-512 where
// the CPU has it, else AVX2. SPECULA_MATMUL_ISA=avx2 forces the narrower one (to compare with
// an AVX2-only machine bit for bit).
#pragma once

#include <vector>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/packed_weights.h"
#include "model/safetensors.h"

namespace specula::cpu {

const char* isa_name(MatmulIsa isa);

// The instruction sets this CPU can run, narrowest first (always includes avx2).
std::vector<MatmulIsa> supported_matmul_isas();

// The one to pack weights for in this process: the widest supported, or SPECULA_MATMUL_ISA's
// choice (an unknown or unsupported value is an error naming it).
MatmulIsa matmul_isa();

// y[n, out] = x[n, in] * W[out, in]^T, on the instruction set w was packed for.
//   x: in  [n, in]   f32, row-major
//   w: in  [out, in] packed checkpoint tensor (any supported dtype)
//   y: out [n, out]  f32, row-major
void matmul(const float* x, const PackedWeights& w, float* y, int n);

// The plain reference: the same product with a scalar double-precision loop (tests only).
void matmul_reference(const float* x, const TensorView& w, float* y, int n);

// Row `row` of a weight tensor as f32 (embedding lookup).
void weight_row(const TensorView& w, int64_t row, float* out /* out [cols] */);

// Every element of a tensor as f32, in order (norm weights, biases): out [numel].
std::vector<float> tensor_f32(const TensorView& t);

}  // namespace specula::cpu
