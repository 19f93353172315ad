// defines: attend_group_avx2, the attention kernel on Avx2 vectors
// (compiled with the project's baseline flags).
#include "engine/cpu/attention_kernel.h"
#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/vector_avx2.h"

namespace specula::cpu {

void attend_group_avx2(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values, int kv_offset,
                       int head_dim, float scale, float* scores, float* out) {
  Attention<Avx2>::attend_group(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
}

}  // namespace specula::cpu
