// defines: attend_group, the softmax attention of one query row's heads over keys read through
// a page list, on the process's instruction set (matmul_isa(): AVX-512 where the CPU has it,
// else AVX2) or a given one (tests compare them); attend_batch, the launcher that runs it for
// every row and key/value head of a ragged batch; attend_batch_reference, its plain
// double-precision reference. Pages of any KvDType (kv/page_storage.h), read as stored.
#pragma once

#include <vector>

#include "engine/batch.h"
#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/paged_rows.h"
#include "kv/kv_plan.h"
#include "kv/page_storage.h"

namespace specula::cpu {

// Softmax attention of `num_heads` query heads that share one key/value head (grouped-query
// attention) over the same keys. Each head's result is computed in one fixed order (keys in
// groups of four with per-key reductions; the softmax a vector of keys at a time with a
// polynomial exp and a fixed-order sum; the weighted sum in key order), so it does not depend
// on num_heads, on the other heads, or on the batch.
//   q:      in  [num_heads, head_dim] (consecutive heads of one row)
//   keys, values: in, keys.num_keys() rows [kv_dim] in position order (the same slots); the
//                 shared head reads [kv_offset, kv_offset + head_dim) of each
//   scores: scratch [num_heads, num_keys] (ends as the attention weights)
//   out:    out [num_heads, head_dim]
void attend_group(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values, int kv_offset,
                  int head_dim, float scale, float* scores, float* out);

// The same on a given instruction set (results differ between sets in the last bits).
void attend_group(MatmulIsa isa, const float* q, int num_heads, const PagedRows& keys, const PagedRows& values,
                  int kv_offset, int head_dim, float scale, float* scores, float* out);

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int window = 0;  // sliding window: a key is seen when query position - key position < window; 0: none
};

// The keys row r of `batch` sees in `layer` (batch.h's visibility rule) through the plan's
// page list of its sequence `seq_index`; kv = 0 for keys, 1 for values. A row's list holds the
// positions 0, 1, ... up to its own (cached slots of the committed prefix, then its in-batch
// ancestors by depth), so a sliding `window` (> 0) hides a prefix of it, as Hugging Face's
// mask (q - k < window) does; the keys that remain are read in the same order.
PagedRows visible_rows(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, int layer, int kv,
                       int seq_index, int r, int window);

// What attend_batch reuses across calls (owned by the caller's workspace).
struct AttentionScratch {
  std::vector<int> seq_of_row;  // [num_rows]
  std::vector<float> scores;    // the one-thread path's [group, num_keys] (each OpenMP thread has its own)
};

// Scaled dot-product attention of every row of `batch` in `layer`, each (row, key/value
// head) through attend_group on `isa` over the slots the row sees; OpenMP over rows x heads
// when the work is worth threads.
//   q:   in  [num_rows, num_heads * head_dim] (RoPE applied)
//   out: out [num_rows, num_heads * head_dim]
void attend_batch(MatmulIsa isa, const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, int layer,
                  const AttentionShape& shape, const float* q, float* out, AttentionScratch& scratch);

// The plain reference of attend_batch: per row and head, scores, softmax and weighted sum in
// double, one key at a time (each element dequantised, PagedRows::element), rounded to float
// at the end.
void attend_batch_reference(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, int layer,
                            const AttentionShape& shape, const float* q, float* out);

}  // namespace specula::cpu
