// defines: matmul_avx512, the batch-invariant product with 16-lane AVX-512 vectors (this unit
// alone is compiled with -mavx512f; matmul.cpp calls it only where the CPU reports AVX-512F).
#include <immintrin.h>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"
#include "engine/cpu/vector_avx512.h"

namespace specula::cpu {

void matmul_avx512(const float* x, const PackedWeights& w, float* y, int n) { matmul_any_dtype<Avx512>(x, w, y, n); }

}  // namespace specula::cpu
