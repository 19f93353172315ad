// defines: attend_group, the softmax attention of one query row's heads over keys gathered
// from the paged cache, on the process's instruction set (matmul_isa(): AVX-512 where the CPU
// has it, else AVX2) or a given one (tests compare them).
#pragma once

#include "engine/cpu/matmul_isa.h"

namespace specula::cpu {

// Softmax attention of `num_heads` query heads that share one key/value head (grouped-query
// attention) over the same `num_keys` keys. Each head's result is computed in one fixed order
// (keys in groups of four with per-key reductions; the softmax a vector of keys at a time with
// a polynomial exp and a fixed-order sum; the weighted sum in key order), so it does not depend
// on num_heads, on the other heads, or on the batch.
//   q:      in  [num_heads, head_dim] (consecutive heads of one row)
//   keys, values: in, num_keys pointers to cache rows [kv_dim]; the shared head reads
//                 [kv_offset, kv_offset + head_dim) of each, keys in position order
//   scores: scratch [num_heads, num_keys] (ends as the attention weights)
//   out:    out [num_heads, head_dim]
void attend_group(const float* q, int num_heads, const float* const* keys, const float* const* values, int num_keys,
                  int kv_offset, int head_dim, float scale, float* scores, float* out);

// The same on a given instruction set (results differ between sets in the last bits).
void attend_group(MatmulIsa isa, const float* q, int num_heads, const float* const* keys, const float* const* values,
                  int num_keys, int kv_offset, int head_dim, float scale, float* scores, float* out);

}  // namespace specula::cpu
