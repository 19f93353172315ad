// defines: matmul_int8_avx2, the int8 product (matmul_int8.h) with AVX2's maddubs + madd
// (the sign trick), 8 outputs per register (compiled with the project's baseline flags).
#include <immintrin.h>

#include "engine/cpu/matmul_int8_tiles.h"

namespace specula::cpu {
namespace {

struct Avx2Int8 {
  static constexpr int kLanes = 8;
  static constexpr int kRows = 2, kGroups = 1, kDecodeGroups = 1;
  using IReg = __m256i;
  using FReg = __m256;
  struct Weight {
    __m256i magnitude, sign;  // |qw| as u8, qw as s8
  };
  static Weight load_weight(const unsigned char* p) {
    const __m256i qw = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi8(char(0x80)));
    return {_mm256_abs_epi8(qw), qw};
  }
  static IReg start(int32_t) { return _mm256_setzero_si256(); }
  static IReg broadcast(int32_t x4) { return _mm256_set1_epi32(x4); }
  // |qw| * (qx with qw's sign) = qw qx; each pair sum is at most 2 * 127 * 127 < 2^15.
  static IReg dot(IReg acc, const Weight& w, IReg x) {
    const __m256i pairs = _mm256_maddubs_epi16(w.magnitude, _mm256_sign_epi8(x, w.sign));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static FReg scales(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static FReg to_float(IReg v) { return _mm256_cvtepi32_ps(v); }
  static FReg set1(float v) { return _mm256_set1_ps(v); }
  static FReg mul(FReg a, FReg b) { return _mm256_mul_ps(a, b); }
  static FReg fma(FReg a, FReg b, FReg c) { return _mm256_fmadd_ps(a, b, c); }
  static FReg zero() { return _mm256_setzero_ps(); }
  static void storeu(float* p, FReg v) { _mm256_storeu_ps(p, v); }
};

}  // namespace

void matmul_int8_avx2(const QuantizedRows& x, const PackedInt8& w, float* y, int n) { int8_product<Avx2Int8>(x, w, y, n); }

}  // namespace specula::cpu
