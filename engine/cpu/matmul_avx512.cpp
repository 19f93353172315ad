// defines: matmul_avx512 and matmul_bf16dot_avx512, the batch-invariant products with 16-lane
// AVX-512 vectors (this unit alone is compiled with -mavx512f; matmul.cpp and
// matmul_bf16dot.cpp call it only where the CPU reports AVX-512F): the float product, and
// bf16dot's two-FMA emulation of vdpbf16ps (matmul_bf16dot.h).
#include <immintrin.h>

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

}  // namespace specula::cpu
