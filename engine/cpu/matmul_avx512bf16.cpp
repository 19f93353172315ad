// defines: matmul_bf16dot_avx512bf16, the bf16dot product (matmul_bf16dot.h) with AVX-512 BF16's
// vdpbf16ps: per f32 lane, the pair's high halves' product then the low halves', each sum
// rounded (this unit alone is compiled with -mavx512bf16; matmul_bf16dot.cpp calls it only
// where the CPU reports it).
#include <immintrin.h>

#include "engine/cpu/matmul_bf16dot.h"
#include "engine/cpu/matmul_tiles.h"
#include "engine/cpu/vector_avx512.h"

namespace specula::cpu {
namespace {

struct HardwareDot {
  using V = Avx512;
  using X = __m512bh;
  using W = __m512bh;
  // 4 rows: 16 accumulators, 4 weight vectors and 4 broadcasts in the 32 registers; 5 and 6
  // rows run no faster, 7 and 8 spill accumulators (docs/architecture.md, BF16DOT products,
  // Kernels).
  static constexpr int kTileRows = 4;
  static constexpr double kFlopsPerNs = 230;  // one 32-product vdpbf16ps a cycle
  static X broadcast(uint32_t pair) { return reinterpret_cast<X>(_mm512_set1_epi32(static_cast<int>(pair))); }
  static W load(const unsigned char* p) { return reinterpret_cast<W>(_mm512_loadu_si512(p)); }
  static __m512 dot(__m512 acc, X x, W w) { return _mm512_dpbf16_ps(acc, x, w); }
};

}  // namespace

void matmul_bf16dot_avx512bf16(const uint32_t* x, const PackedWeights& w, float* y, int n) {
  matmul_pairs<HardwareDot>(x, w, y, n);
}

}  // namespace specula::cpu
