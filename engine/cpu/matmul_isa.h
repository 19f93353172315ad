// defines: MatmulIsa, the instruction sets the matrix product is compiled for, and their
// entry points, for matmul.cpp's dispatch (and the tests that check each path on its own).
#pragma once

namespace specula::cpu {

enum class MatmulIsa { avx2, avx512 };

class PackedWeights;

// y[n, out] = x[n, in] * W[out, in]^T for weights packed for that ISA; shapes as in matmul (matmul.h).
void matmul_avx2(const float* x, const PackedWeights& w, float* y, int n);
void matmul_avx512(const float* x, const PackedWeights& w, float* y, int n);  // needs AVX-512F

}  // namespace specula::cpu
