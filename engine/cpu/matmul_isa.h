// defines: the per-instruction-set entry points of the batch-invariant product, for
// matmul.cpp's dispatch (and the tests that check each path on its own).
#pragma once

#include "engine/safetensors.h"

namespace specula::cpu {

// y[n, out] = x[n, in] * W[out, in]^T; shapes as in matmul_weights (matmul.h).
void matmul_avx2(const float* x, const TensorView& w, float* y, int n);
void matmul_avx512(const float* x, const TensorView& w, float* y, int n);  // needs AVX-512F

}  // namespace specula::cpu
