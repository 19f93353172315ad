// defines: MatmulIsa, the instruction sets the matrix product and attention are compiled for,
// and their entry points, for the dispatch in matmul.cpp and attention.cpp.
#pragma once

namespace specula::cpu {

enum class MatmulIsa { avx2, avx512 };

class PackedWeights;

// y[n, out] = x[n, in] * W[out, in]^T for weights packed for that ISA; shapes as in matmul (matmul.h).
void matmul_avx2(const float* x, const PackedWeights& w, float* y, int n);
void matmul_avx512(const float* x, const PackedWeights& w, float* y, int n);  // needs AVX-512F

// attend_group (attention.h) per ISA.
struct PagedRows;
void attend_group_avx2(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values, int kv_offset,
                       int head_dim, float scale, float* scores, float* out);
void attend_group_avx512(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values, int kv_offset,
                         int head_dim, float scale, float* scores, float* out);  // needs AVX-512F

}  // namespace specula::cpu
