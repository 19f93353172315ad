// defines: Avx2, the 8-lane vector traits (AVX2 + FMA + F16C) the ISA-generic kernels
// (matmul_tiles.h, attention_kernel.h) are instantiated with. Included only by the AVX2 units;
// in an unnamed namespace, so each unit has its own copy.
#pragma once

#include <immintrin.h>

#include "model/safetensors.h"

namespace specula::cpu {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg loadx(const float* p) { return _mm256_loadu_ps(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }

  // The matmul tile's rows (matmul_tiles.h): 3 x 4 accumulators, 4 weights and 3 broadcasts
  // in the 16 registers.
  static constexpr int kTileRows = 3;
  // k values per matmul step: a BF16 load holds a pair per output.
  template <DType T>
  static constexpr int kPair = T == DType::BF16 ? 2 : 1;

  template <DType T>
  static Reg load(const unsigned char* p, int v) {
    if constexpr (T == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      return bf16_half(load_pairs(p), v);
    }
  }

  // BF16 pairs (k, k + 1) in 32-bit lanes, k the low half: the packed BF16 weights' steps
  // (matmul_tiles.h) and bf16dot's rounded activations (matmul_bf16dot.h).
  using Pairs = __m256i;
  static Pairs load_pairs(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Pairs broadcast_pair(uint32_t pair) { return _mm256_set1_epi32(static_cast<int>(pair)); }
  // The pairs' values k + v as f32: the low halves shifted up (v = 0), the high halves masked (v = 1).
  static Reg bf16_half(Pairs pairs, int v) {
    return _mm256_castsi256_ps(v == 0 ? _mm256_slli_epi32(pairs, 16)
                                      : _mm256_and_si256(pairs, _mm256_set1_epi32(int(0xFFFF0000u))));
  }

  // ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
  static float hsum(Reg v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }

  // For attention and the elementwise ops (attention_kernel.h, vector_math.h, ops.cpp).
  static Reg set1(float v) { return _mm256_set1_ps(v); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static void storeu(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg round(Reg v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127] (its exponent bits).
  static Reg pow2(Reg n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  // The sums of 4 registers in one fixed order each: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7))
  // (two hadds, then the halves); the registers' lanes never mix.
  static __m128 hsum4(const Reg v[4]) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  }
};

}  // namespace
}  // namespace specula::cpu
