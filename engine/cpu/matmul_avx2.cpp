// defines: matmul_avx2, the batch-invariant product with 8-lane AVX2 + FMA + F16C vectors
// (compiled with the project's baseline flags).
#include <immintrin.h>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"
#include "engine/cpu/vector_avx2.h"

namespace specula::cpu {

void matmul_avx2(const float* x, const PackedWeights& w, float* y, int n) { matmul_any_dtype<Avx2>(x, w, y, n); }

}  // namespace specula::cpu
