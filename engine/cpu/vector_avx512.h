// defines: Avx512, the 16-lane vector traits (AVX-512F) the ISA-generic kernels
// (matmul_tiles.h, attention_kernel.h) are instantiated with. Included only by the units
// compiled with -mavx512f; in an unnamed namespace, so each unit has its own copy.
#pragma once

#include <immintrin.h>

#include "model/safetensors.h"

namespace specula::cpu {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg loadx(const float* p) { return _mm512_loadu_ps(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }

  // The matmul tile's rows (matmul_tiles.h): 6 x 4 accumulators, 4 weights and 6 broadcasts
  // in the 32 registers.
  static constexpr int kTileRows = 6;
  // k values per matmul step: a BF16 load holds a pair per output.
  template <DType T>
  static constexpr int kPair = T == DType::BF16 ? 2 : 1;

  template <DType T>
  static Reg load(const unsigned char* p, int v) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      return bf16_half(load_pairs(p), v);
    }
  }

  // BF16 pairs (k, k + 1) in 32-bit lanes, k the low half: the packed BF16 weights' steps
  // (matmul_tiles.h) and bf16dot's rounded activations (matmul_bf16dot.h).
  using Pairs = __m512i;
  static Pairs load_pairs(const unsigned char* p) { return _mm512_loadu_si512(p); }
  static Pairs broadcast_pair(uint32_t pair) { return _mm512_set1_epi32(static_cast<int>(pair)); }
  // The pairs' values k + v as f32: the low halves shifted up (v = 0), the high halves masked (v = 1).
  static Reg bf16_half(Pairs pairs, int v) {
    return _mm512_castsi512_ps(v == 0 ? _mm512_slli_epi32(pairs, 16)
                                      : _mm512_and_si512(pairs, _mm512_set1_epi32(int(0xFFFF0000u))));
  }

  // (lanes 0-7 + lanes 8-15), then the AVX2 unit's 8-lane order.
  static float hsum(Reg v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }

  // For attention and the elementwise ops (attention_kernel.h, vector_math.h, ops.cpp).
  static Reg set1(float v) { return _mm512_set1_ps(v); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static void storeu(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg round(Reg v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127] (its exponent bits).
  static Reg pow2(Reg n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  // The sums of 4 registers in one fixed order each: lanes 0-7 + lanes 8-15, then the AVX2
  // order (two hadds, then the halves); the registers' lanes never mix.
  static __m128 hsum4(const Reg v[4]) {
    __m256 h[4];
    for (int i = 0; i < 4; ++i)
      h[i] = _mm256_add_ps(_mm512_castps512_ps256(v[i]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[i]), 1)));
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  }
};

}  // namespace
}  // namespace specula::cpu
