// defines: matmul_int8_vnni, the int8 product (matmul_int8.h) with AVX-512 VNNI's vpdpbusd,
// 16 outputs per register (this unit alone is compiled with -mavx512vnni; matmul_int8.cpp
// calls it only where the CPU reports it).
#include <immintrin.h>

#include "engine/cpu/matmul_int8_tiles.h"

namespace specula::cpu {
namespace {

struct Vnni {
  static constexpr int kLanes = 16;
  static constexpr int kRows = 4, kGroups = 2, kDecodeGroups = 4;
  using IReg = __m512i;
  using FReg = __m512;
  using Weight = __m512i;  // u8 qw + 128
  static Weight load_weight(const unsigned char* p) { return _mm512_load_si512(p); }
  static IReg start(int32_t bias) { return _mm512_set1_epi32(bias); }
  static IReg broadcast(int32_t x4) { return _mm512_set1_epi32(x4); }
  // sum (qw + 128) qx = sum qw qx + 128 sum qx; start() took the second term off.
  static IReg dot(IReg acc, Weight w, IReg x) { return _mm512_dpbusd_epi32(acc, w, x); }
  static FReg scales(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static FReg to_float(IReg v) { return _mm512_cvtepi32_ps(v); }
  static FReg set1(float v) { return _mm512_set1_ps(v); }
  static FReg mul(FReg a, FReg b) { return _mm512_mul_ps(a, b); }
  static FReg fma(FReg a, FReg b, FReg c) { return _mm512_fmadd_ps(a, b, c); }
  static FReg zero() { return _mm512_setzero_ps(); }
  static void storeu(float* p, FReg v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

void matmul_int8_vnni(const QuantizedRows& x, const PackedInt8& w, float* y, int n) { int8_product<Vnni>(x, w, y, n); }

}  // namespace specula::cpu
