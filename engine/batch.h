// defines: RaggedBatch, the rows of many sequences in one forward as offsets plus flat data
// (FlashInfer / vLLM style); SequenceRows, one sequence's part as callers describe it (a
// prefill chunk, one decode row, or a token tree with its parents); plan_batch, the host-side
// planner that turns the per-sequence parent arrays into the batch's visibility CSR once,
// for any backend.
#pragma once

#include <span>
#include <vector>

#include "model/model_config.h"
#include "kv/block_tables.h"

namespace specula {

// Which of a sequence's rows want logits.
enum class RowLogits { kNone, kLast, kAll };

// n new tokens appended to sequence `seq`, which already holds C cached slots; token i is
// written to slot C + i. What it attends to:
//   parents empty: a causal chain (prefill, decode): every cached slot and tokens 0..i.
//   parents non-empty: the rows are the last n nodes of a token tree whose parent array is
//     `parents` ([T + n]: T earlier nodes already cached, in the last T slots, node t at slot
//     tree_start + t with tree_start = C - T). Node t sees the prefix [0, tree_start), its
//     ancestors and itself; parents[t] = -1 marks a child of the prefix, otherwise
//     parents[t] < t (topological order). A one-shot tree verify has T = 0; a draft that grows
//     its tree level by level passes the whole parent array each time.
struct SequenceRows {
  int seq = -1;
  std::span<const int> tokens;     // in [n]
  std::span<const int> positions;  // in [n] RoPE positions (prefix position + depth for tree nodes)
  std::span<const int> parents;    // in [T + n] or empty
  RowLogits logits = RowLogits::kAll;
};

// One forward over the rows of num_seqs sequences (spans in order, each sequence once).
// Row r of span s (row_indptr[s] <= r < row_indptr[s + 1]) sees the slots
// [0, visible_prefix[s]) of its sequence, then:
//   mask_indptr[r] == mask_indptr[r + 1]: causal: slots visible_prefix[s] .. visible_prefix[s] + (r - row_indptr[s]);
//   otherwise: the slots mask_indices[mask_indptr[r] .. mask_indptr[r + 1]) (ascending, its own last).
// (An explicit list is never empty: a row always sees itself.)
struct RaggedBatch {
  std::vector<int> tokens;          // [num_rows]
  std::vector<int> positions;       // [num_rows]
  std::vector<int> seqs;            // [num_seqs] KV sequence of each span
  std::vector<int> row_indptr;      // [num_seqs + 1]
  std::vector<int> visible_prefix;  // [num_seqs] cached slots every row of the span sees
  std::vector<int> mask_indptr;     // [num_rows + 1]
  std::vector<int> mask_indices;    // [mask_indptr[num_rows]] slots, see above
  std::vector<int> logit_rows;      // [num_logits] rows whose logits are wanted, ascending

  int num_rows() const { return static_cast<int>(tokens.size()); }
  int num_seqs() const { return static_cast<int>(seqs.size()); }
  int num_logits() const { return static_cast<int>(logit_rows.size()); }
  int span_rows(int s) const { return row_indptr[static_cast<std::size_t>(s) + 1] - row_indptr[static_cast<std::size_t>(s)]; }
  std::vector<int> rows_per_seq() const;  // [num_seqs] (the counts KvCache::prepare appends)
};

// The batch of `parts` (distinct sequences, at least one row each) given each sequence's
// cached length in `tables`. Throws SpeculaError for a token outside [0, vocab_size), a
// position outside [0, max_position_embeddings), a parent array that is not topological or
// claims more earlier nodes than are cached.
RaggedBatch plan_batch(std::span<const SequenceRows> parts, const BlockTables& tables, const ModelConfig& config);

}  // namespace specula
