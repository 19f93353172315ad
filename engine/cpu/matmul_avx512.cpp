// defines: matmul_avx512 and matmul_bf16dot_avx512, the batch-invariant products with 16-lane
// AVX-512 vectors (this unit alone is compiled with -mavx512f; matmul.cpp and
// matmul_bf16dot.cpp call it only where the CPU reports AVX-512F): the float product, and
// bf16dot's two-FMA emulation of vdpbf16ps (matmul_bf16dot.h); and bf16dot's activation
// rounding 16 values a step (bf16dot_round_rows_avx512).
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "base/region_check.h"
#include "engine/cpu/matmul_bf16dot.h"
#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"
#include "engine/cpu/vector_avx512.h"

namespace specula::cpu {

void matmul_avx512(const float* x, const PackedWeights& w, float* y, int n) { matmul_any_dtype<Avx512>(x, w, y, n); }

// 4 rows: 16 accumulators, 8 x halves and 2 weight halves in the 32 registers.
void matmul_bf16dot_avx512(const uint32_t* x, const PackedWeights& w, float* y, int n) {
  matmul_pairs<EmulatedDot<Avx512, 4>>(x, w, y, n);
}

void bf16dot_round_rows_avx512(const float* x, int n, int64_t in, std::vector<uint32_t>& out) {
  const int64_t pairs = (in + 1) / 2;
  out.resize(static_cast<std::size_t>(n * pairs));
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF), infinity = _mm512_set1_epi32(0x7F800000);
  const __m512i half_ulp = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x0040);
  const __m512i exponent = _mm512_set1_epi32(0x7F80), sign = _mm512_set1_epi32(0x8000);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * in;
    unsigned char* dst = reinterpret_cast<unsigned char*>(out.data() + r * pairs);  // BF16 values, x[k] at 2k bytes
    check_region(row, static_cast<std::size_t>(in) * sizeof(float));
    check_region(dst, static_cast<std::size_t>(pairs) * sizeof(uint32_t));
    int64_t k = 0;
    for (; k + 16 <= in; k += 16) {  // bf16dot_round, lane by lane
      const __m512i bits = _mm512_loadu_si512(row + k);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, magnitude), infinity);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      __m512i value = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(half_ulp, lsb)), 16);
      value = _mm512_mask_and_epi32(value, _mm512_testn_epi32_mask(value, exponent), value, sign);  // subnormal: signed 0
      value = _mm512_mask_or_epi32(value, nan, _mm512_srli_epi32(bits, 16), quiet);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * k), _mm512_cvtepi32_epi16(value));
    }
    for (; k < in; ++k) {
      const uint16_t value = bf16dot_round(row[k]);
      std::memcpy(dst + 2 * k, &value, 2);
    }
    if (in % 2 != 0) std::memset(dst + 2 * in, 0, 2);  // an odd in's last high half
  }
}

}  // namespace specula::cpu
