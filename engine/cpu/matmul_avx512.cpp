// defines: matmul_avx512, the batch-invariant product with 16-lane AVX-512 vectors (this unit
// alone is compiled with -mavx512f; matmul.cpp calls it only where the CPU reports AVX-512F).
#include <immintrin.h>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"

namespace specula::cpu {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg loadx(const float* p) { return _mm512_loadu_ps(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }

  template <DType T>
  static constexpr int kVectors = T == DType::BF16 ? 2 : 1;

  template <DType T>
  static Reg load(const unsigned char* p, int v) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {  // BF16 pairs: the even one is the low half shifted up, the odd one the high half
      const __m512i pairs = _mm512_loadu_si512(p);
      return _mm512_castsi512_ps(v == 0 ? _mm512_slli_epi32(pairs, 16)
                                        : _mm512_and_si512(pairs, _mm512_set1_epi32(int(0xFFFF0000u))));
    }
  }

  // (lanes 0-7 + lanes 8-15), then the AVX2 unit's 8-lane order.
  static float hsum(Reg v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

}  // namespace

void matmul_avx512(const float* x, const PackedWeights& w, float* y, int n) { matmul_any_dtype<Avx512>(x, w, y, n); }

}  // namespace specula::cpu
