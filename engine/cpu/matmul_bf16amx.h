// defines: matmul_bf16amx, the CPU matrix product of the bf16amx format (MatrixFormat::kBF16Amx,
// `--weights bf16amx`): bf16dot's operands (weights in BF16 with subnormals flushed, activations
// rounded by bf16dot_round; matmul_bf16dot.h) multiplied by AMX-BF16's tile instruction
// TDPBF16PS; bf16amx_unsupported, why this process cannot run it (empty when it can); and
// bf16amx_error_bound, the bound the tests hold it to.
//
// Arithmetic of y[r][o]: acc = +0; then for the k tiles t = 0, 1, ... in order (32 k each: 16
// pairs, the last padded with zero pairs in x and in w), acc = TDPBF16PS(acc, x̂[r][tile t],
// ŵ[o][tile t]): the hardware's sum of acc and the tile's 32 exact products. How it rounds
// inside a tile is the hardware's own: it equals neither two FMAs per pair (bf16dot's order),
// nor one rounding per pair, nor one per tile (docs/architecture.md, BF16AMX products). So
// bf16amx is a format of its own, not a kernel of bf16dot, and it has one kernel: the tile
// instruction (no emulation, no other instruction set). What
// it keeps is batch invariance: each element is one chain of tile steps over k in order from
// zero, computed from its own row of x and column of w alone, so a row's value depends on no
// row count, tile position, thread split or block; every row count (one decode row included)
// runs the same instruction sequence per element (tests/test_engine_bf16amx.cpp).
//
// Error against the exact Σ x w (x, w as given): the BF16 roundings of x and w, as in bf16dot,
// then the tile sums, measured (tests) within f32 additions' own bound:
//   |y - Σ x w| <= (2^-7 + 2^-16) Σ |x w| + γ_m (1 + 2^-8)^2 Σ |x w|,  γ_m = m u / (1 - m u),
// m = 32 ceil(in / 32) (the products the tiles add), u = 2^-24.
#pragma once

#include <cstdint>
#include <string>

#include "engine/cpu/packed_weights.h"

namespace specula::cpu {

// k pairs per tile step: TDPBF16PS reads 16 rows of 64 bytes of weights (16 pairs of 16
// outputs), and PackedWeights pads the steps to a multiple of it (packed_weights.h).
inline constexpr int64_t kAmxPairsPerTile = 16;

// Empty when this process can run the bf16amx kernel: the CPU reports AMX-TILE, AMX-BF16 and
// AVX-512F, the OS enables the tile state (XCR0) and grants it to this process (Linux >= 5.16,
// arch_prctl ARCH_REQ_XCOMP_PERM, asked once). Otherwise which of these is missing.
const std::string& bf16amx_unsupported();

// The bound above for one element (bf16_products_error_bound with m additions).
//   abs_sum: Σ |x w| of that element; in: the inner size
double bf16amx_error_bound(double abs_sum, int64_t in);

// y[n, out] = x[n, in] * W[out, in]^T as above.
//   x: in [n, in] f32; w: BF16, packed for avx512 with subnormals flushed and steps padded to
//   kAmxPairsPerTile; y: out [n, out] f32
void matmul_bf16amx(const float* x, const PackedWeights& w, float* y, int n);

// The tile kernel (matmul_amx.cpp, the one unit compiled for AMX) on rows already rounded.
//   x: in [n, w.steps()] BF16 pairs (bf16dot_round_rows, zero past (in + 1) / 2)
void matmul_bf16amx_tiles(const uint32_t* x, const PackedWeights& w, float* y, int n);

}  // namespace specula::cpu
