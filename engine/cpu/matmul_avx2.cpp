// defines: matmul_avx2 and matmul_bf16dot_avx2, the batch-invariant products with 8-lane AVX2 +
// FMA + F16C vectors (compiled with the project's baseline flags): the float product, and
// bf16dot's two-FMA emulation of vdpbf16ps (matmul_bf16dot.h).
#include <immintrin.h>

#include "engine/cpu/matmul_bf16dot.h"
#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"
#include "engine/cpu/vector_avx2.h"

namespace specula::cpu {

void matmul_avx2(const float* x, const PackedWeights& w, float* y, int n) { matmul_any_dtype<Avx2>(x, w, y, n); }

// 2 rows: 8 accumulators, 4 x halves and 2 weight halves in the 16 registers.
void matmul_bf16dot_avx2(const uint32_t* x, const PackedWeights& w, float* y, int n) {
  matmul_pairs<EmulatedDot<Avx2, 2>>(x, w, y, n);
}

}  // namespace specula::cpu
