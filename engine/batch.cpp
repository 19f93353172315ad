#include "engine/batch.h"

#include <algorithm>

#include "base/error.h"

namespace specula {

std::vector<int> RaggedBatch::rows_per_seq() const {
  std::vector<int> counts(seqs.size());
  for (int s = 0; s < num_seqs(); ++s) counts[static_cast<std::size_t>(s)] = span_rows(s);
  return counts;
}

RaggedBatch plan_batch(std::span<const SequenceRows> parts, const BlockTables& tables, const ModelConfig& c) {
  SPECULA_CHECK(!parts.empty(), "forward: empty batch");
  RaggedBatch b;
  b.row_indptr.assign(1, 0);
  b.mask_indptr.assign(1, 0);
  for (const SequenceRows& part : parts) {
    const int n = static_cast<int>(part.tokens.size());
    SPECULA_CHECK(n > 0, "forward: sequence ", part.seq, " has no rows");
    SPECULA_CHECK(part.positions.size() == part.tokens.size(), "forward: ", part.positions.size(), " positions for ",
                  n, " tokens");
    const int earlier_nodes = part.parents.empty() ? 0 : static_cast<int>(part.parents.size()) - n;
    SPECULA_CHECK(earlier_nodes >= 0, "forward: ", part.parents.size(), " parents for ", n, " tokens");
    for (std::size_t t = 0; t < part.parents.size(); ++t) {
      SPECULA_CHECK(part.parents[t] >= -1 && part.parents[t] < static_cast<int>(t), "forward: parent of tree node ",
                    t, " must precede it (topological order)");
    }
    const int first_slot = tables.length(part.seq);
    const int tree_start = first_slot - earlier_nodes;
    SPECULA_CHECK(tree_start >= 0, "forward: ", earlier_nodes, " earlier tree nodes but only ", first_slot,
                  " cached slots");
    for (int i = 0; i < n; ++i) {
      SPECULA_CHECK(part.tokens[i] >= 0 && part.tokens[i] < c.vocab_size, "forward: token id ", part.tokens[i],
                    " is outside the vocabulary [0, ", c.vocab_size, ")");
      SPECULA_CHECK(part.positions[i] >= 0 && part.positions[i] < c.max_position_embeddings, "forward: position ",
                    part.positions[i], " is outside [0, max_position_embeddings = ", c.max_position_embeddings, ")");
    }
    const int row0 = b.num_rows();
    b.seqs.push_back(part.seq);
    b.tokens.insert(b.tokens.end(), part.tokens.begin(), part.tokens.end());
    b.positions.insert(b.positions.end(), part.positions.begin(), part.positions.end());
    b.row_indptr.push_back(row0 + n);
    if (part.parents.empty()) {
      b.visible_prefix.push_back(first_slot);
      for (int i = 0; i < n; ++i) b.mask_indptr.push_back(static_cast<int>(b.mask_indices.size()));
    } else {
      b.visible_prefix.push_back(tree_start);
      for (int i = 0; i < n; ++i) {
        const std::size_t start = b.mask_indices.size();
        for (int t = earlier_nodes + i; t >= 0; t = part.parents[static_cast<std::size_t>(t)])
          b.mask_indices.push_back(tree_start + t);
        std::reverse(b.mask_indices.begin() + static_cast<long>(start), b.mask_indices.end());
        b.mask_indptr.push_back(static_cast<int>(b.mask_indices.size()));
      }
    }
    if (part.logits == RowLogits::kAll) {
      for (int i = 0; i < n; ++i) b.logit_rows.push_back(row0 + i);
    } else if (part.logits == RowLogits::kLast) {
      b.logit_rows.push_back(row0 + n - 1);
    }
  }
  for (int s = 0; s < b.num_seqs(); ++s)
    SPECULA_CHECK(std::count(b.seqs.begin(), b.seqs.begin() + s, b.seqs[static_cast<std::size_t>(s)]) == 0,
                  "forward: sequence ", b.seqs[static_cast<std::size_t>(s)], " appears twice in one batch");
  return b;
}

}  // namespace specula
