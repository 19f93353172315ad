// defines: matmul_bf16dot, the CPU matrix product of the bf16dot format (MatrixFormat::kBF16Dot,
// `--weights bf16dot`): weights packed in BF16 (packed_weights.h, subnormals flushed to zero),
// activations rounded to BF16 once per product (bf16dot_round), products exact, f32
// accumulation; its three kernels (AVX-512 BF16's vdpbf16ps, and a bit-identical emulation on
// AVX-512F and on AVX2), the kernel choice, and the plain rounding routine they all share.
//
// Arithmetic of y[r][o], for the k pairs s = 0, 1, ..., ceil(in / 2) - 1 in order, acc from +0
// (x̂, ŵ: x and w rounded to BF16; an odd in's last pair has x̂ = ŵ = 0 in its high half):
//   acc = round_f32(acc + x̂[2s + 1] ŵ[2s + 1])      the pair's high half (odd k) first,
//   acc = round_f32(acc + x̂[2s] ŵ[2s])              then the low half (even k)
// each product exact (8 x 8 significant bits), each sum rounded to nearest even: what
// vdpbf16ps does per f32 lane (docs/architecture.md, BF16DOT products, Order), and what
// fma(x̂_hi, ŵ_hi, acc) then fma(x̂_lo, ŵ_lo, acc) computes. The hardware
// also treats subnormal inputs as zero and flushes subnormal results to zero; the inputs are
// flushed beforehand (weights at packing, activations when rounded), so the emulation gives the
// same bits except where a sum itself falls below 2^-126 (a subnormal f32 result: the
// hardware makes it zero, the FMA keeps it), which needs an accumulator below the smallest
// normal f32. Each output is one chain over k pairs in order from zero, so its value depends
// on no row count, tiling, k-blocking, thread count or kernel: a verify row equals the row
// decoded alone (batch invariance), and the three kernels agree bit for bit.
//
// Error against the exact Σ x w (x, w as given, before rounding): the roundings are relative,
// |x̂ - x| <= 2^-8 |x| and |ŵ - w| <= 2^-8 |w| (8 significant bits, ties to even), then in f32
// additions in sequence, so
//   |y - Σ x w| <= (2^-7 + 2^-16) Σ |x w| + γ_m (1 + 2^-8)^2 Σ |x w|,  γ_m = m u / (1 - m u),
// m = 2 ceil(in / 2) additions, u = 2^-24 (no overflow, and inputs and sums away from the
// subnormal range).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/packed_weights.h"

namespace specula::cpu {

// A BF16 value with a subnormal (exponent bits 0, mantissa not) made zero of its sign; any
// other value as it is.
inline uint16_t bf16_flush_subnormal(uint16_t b) { return (b & 0x7F80u) == 0 ? uint16_t(b & 0x8000u) : b; }

// v rounded to BF16: to nearest, ties to even; a subnormal result flushed to zero (of v's
// sign); infinities kept; NaN kept NaN (quiet, its sign and top mantissa bits kept). The one
// rounding of activations every kernel uses.
inline uint16_t bf16dot_round(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return bf16_flush_subnormal(static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16));
}

// The bound above for one element whose rounded products are summed in `additions` f32
// additions (bf16dot: m = 2 ceil(in / 2); bf16amx's tiles: 32 ceil(in / 32), matmul_bf16amx.h).
//   abs_sum: Σ |x w| of that element, x and w before rounding
double bf16_products_error_bound(double abs_sum, int64_t additions);

// Rows of x rounded to BF16 pairs: out[r][s] = x̂[r][2s] | x̂[r][2s + 1] << 16 (an odd in's last
// high half 0).  x: in [n, in] f32; out: out [n, (in + 1) / 2], resized
void bf16dot_round_rows(const float* x, int n, int64_t in, std::vector<uint32_t>& out);
// The same bits with 16 values a step (AVX-512F; matmul_avx512.cpp): what the avx512 and
// avx512bf16 kernels use, since the scalar routine costs as much as a small product.
void bf16dot_round_rows_avx512(const float* x, int n, int64_t in, std::vector<uint32_t>& out);

// The bf16dot kernels: the hardware instruction, or its emulation with two FMAs per pair on
// the process's instruction set.
enum class Bf16DotKernel { avx2, avx512, avx512bf16 };
const char* bf16dot_kernel_name(Bf16DotKernel kernel);
// avx512bf16 where `isa` is avx512 and the CPU has AVX-512 BF16 (and BW, VL); else the
// emulation of `isa`.
Bf16DotKernel bf16dot_kernel(MatmulIsa isa);
// The kernels this CPU runs, and the instruction set each one's weights are packed for.
std::vector<Bf16DotKernel> supported_bf16dot_kernels();
MatmulIsa bf16dot_kernel_isa(Bf16DotKernel kernel);

// y[n, out] = x[n, in] * W[out, in]^T as above.
//   x: in [n, in] f32; w: BF16, packed for bf16dot_kernel_isa(kernel) with subnormals flushed;
//   y: out [n, out] f32
void matmul_bf16dot(const float* x, const PackedWeights& w, float* y, int n, Bf16DotKernel kernel);

// The kernels on rows already rounded (x: bf16dot_round_rows(..., w.in(), ...)'s n rows).
void matmul_bf16dot_avx2(const uint32_t* x, const PackedWeights& w, float* y, int n);
void matmul_bf16dot_avx512(const uint32_t* x, const PackedWeights& w, float* y, int n);      // needs AVX-512F
void matmul_bf16dot_avx512bf16(const uint32_t* x, const PackedWeights& w, float* y, int n);  // needs AVX-512 BF16

}  // namespace specula::cpu
