// defines: matmul_int8, the CPU matrix product y = x W^T against int8 weights with per-block
// f16 scales (packed_int8.h): the activations quantised per row and block (quantize_rows),
// exact int32 block dot products (AVX-512 VNNI vpdpbusd, or AVX2 maddubs/madd), each block's
// sum scaled to f32 and accumulated; the kernel choice, and the plain references.
//
// Arithmetic of y[r][o], for blocks b = 0, 1, ... in order (the same on every kernel):
//   isum_b = sum over the block of qx[r][k] * qw[o][k]        (int32, exact in any order)
//   acc    = fma(float(isum_b), hw[o][b] * dx[r][b], acc)     (f32, acc starting at 0)
// so every output element is reduced in one fixed order whatever the row count, the tiling,
// the thread count or the kernel: the VNNI and AVX2 kernels and matmul_int8_scalar agree bit
// for bit, and a row of a verify pass equals the same row decoded alone (batch invariance).
//
// Error against the exact product sum x w (x f32, w as stored), with ŵ = hw qw, x̂ = dx qx:
//   |y - x·w| <= sum_b [ hw_b/2 · sum_b |x| + dx_b/2 · sum_b |ŵ| ] (1 + 2^-14)
//              + (blocks + 2) 2^-24 · sum |x̂| |ŵ|
// (|x - x̂| <= dx/2 and |w - ŵ| <= hw/2 from rounding to nearest with scales covering the
// block's max, plus the f32 rounding of the scale products and the sequential sum);
// int8_error_bound computes it. Since hw <= max_b|w| / 127 (1 + 2^-10) and dx ~ max_b|x| / 127,
// it is about sum_b (max_b|w| sum_b|x| + max_b|x| sum_b|w|) / 254.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/packed_int8.h"

namespace specula::cpu {

// Rows of activations quantised per block of PackedInt8::kBlock values:
// dx = max|x| / 127 over the block (f32), qx = round(x / dx) in [-127, 127] (0 where dx = 0).
struct QuantizedRows {
  int64_t blocks = 0;        // per row
  std::vector<int8_t> q;     // [n, blocks * kBlock]  qx, zero past `in`
  std::vector<float> scale;  // [n, blocks]           dx
  std::vector<int32_t> bias; // [n, blocks]           -128 * the block's sum of qx (VNNI's u8 offset, below)
};

//   x: in [n, in] f32 row-major; out: out, resized
void quantize_rows(const float* x, int n, int64_t in, QuantizedRows& out);

// The int8 kernels. VNNI multiplies u8 by s8: the weights are stored as qw + 128 and the
// block's -128 * sum(qx) (QuantizedRows::bias) starts its accumulator. AVX2 recovers qw
// (xor 0x80) and multiplies |qw| by qx carrying qw's sign (maddubs's pairs stay below 2^15).
enum class Int8Kernel { avx2, vnni };
const char* int8_kernel_name(Int8Kernel kernel);
// VNNI where `isa` is avx512 and the CPU has AVX-512 BW, VL and VNNI; else AVX2.
Int8Kernel int8_kernel(MatmulIsa isa);

// y[n, out] = x[n, in] * W[out, in]^T, W int8 as above.
//   x: in [n, in] f32; y: out [n, out] f32
void matmul_int8(const float* x, const PackedInt8& w, float* y, int n, Int8Kernel kernel);

// The kernels on rows already quantised (x: the n rows of quantize_rows(..., w.in(), ...)).
void matmul_int8_avx2(const QuantizedRows& x, const PackedInt8& w, float* y, int n);
void matmul_int8_vnni(const QuantizedRows& x, const PackedInt8& w, float* y, int n);  // needs AVX-512 VNNI

// The plain references (tests only): the same arithmetic as a scalar loop (bit-identical to
// the kernels), and the bound above on |y[r][o] - x·w| (x f32, w the weights before quantisation)
//   x: in [n, in]; y, bound: out [n, out]
void matmul_int8_scalar(const float* x, const PackedInt8& w, float* y, int n);
void int8_error_bound(const float* x, const PackedInt8& w, double* bound, int n);

}  // namespace specula::cpu
