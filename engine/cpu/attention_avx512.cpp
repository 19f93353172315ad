// defines: attend_group_avx512, the attention kernel on Avx512 vectors
// (compiled with -mavx512f; called only where the CPU reports AVX-512F).
#include "engine/cpu/attention_kernel.h"
#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/vector_avx512.h"

namespace specula::cpu {

void attend_group_avx512(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values, int kv_offset,
                       int head_dim, float scale, float* scores, float* out) {
  Attention<Avx512>::attend_group(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
}

}  // namespace specula::cpu
