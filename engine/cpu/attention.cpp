#include "engine/cpu/attention.h"

#include "engine/cpu/matmul.h"

namespace specula::cpu {

void attend_group(MatmulIsa isa, const float* q, int num_heads, const float* const* keys, const float* const* values,
                  int num_keys, int kv_offset, int head_dim, float scale, float* scores, float* out) {
  if (isa == MatmulIsa::avx512)
    return attend_group_avx512(q, num_heads, keys, values, num_keys, kv_offset, head_dim, scale, scores, out);
  attend_group_avx2(q, num_heads, keys, values, num_keys, kv_offset, head_dim, scale, scores, out);
}

void attend_group(const float* q, int num_heads, const float* const* keys, const float* const* values, int num_keys,
                  int kv_offset, int head_dim, float scale, float* scores, float* out) {
  attend_group(matmul_isa(), q, num_heads, keys, values, num_keys, kv_offset, head_dim, scale, scores, out);
}

}  // namespace specula::cpu
