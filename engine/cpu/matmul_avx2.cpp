// defines: matmul_avx2, the batch-invariant product with 8-lane AVX2 + FMA + F16C vectors
// (compiled with the project's baseline flags).
#include <immintrin.h>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"

namespace specula::cpu {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg loadx(const float* p) { return _mm256_loadu_ps(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }

  template <DType T>
  static constexpr int kVectors = T == DType::BF16 ? 2 : 1;

  template <DType T>
  static Reg load(const unsigned char* p, int v) {
    if constexpr (T == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {  // BF16 pairs: the even one is the low half shifted up, the odd one the high half
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return _mm256_castsi256_ps(v == 0 ? _mm256_slli_epi32(pairs, 16)
                                        : _mm256_and_si256(pairs, _mm256_set1_epi32(int(0xFFFF0000u))));
    }
  }

  // ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
  static float hsum(Reg v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

}  // namespace

void matmul_avx2(const float* x, const PackedWeights& w, float* y, int n) { matmul_any_dtype<Avx2>(x, w, y, n); }

}  // namespace specula::cpu
