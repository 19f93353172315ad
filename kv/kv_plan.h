// defines: KvCopy (one block or slot copy that block-table operations ask the page storage
// to make) and KvPlan (what a forward needs of the block tables for one batch: FlashInfer-style
// page lists of its sequences and the slot of every new row).
#pragma once

#include <vector>

namespace specula {

// A copy between pages, every layer, keys and values. Block copies come from copy-on-write
// (a shared block about to be written), slot copies from commit (an accepted tree node moved
// into place). Copies run in list order: a later one may read what an earlier one wrote.
struct KvCopy {
  enum class Kind { kBlock, kSlot };
  Kind kind;
  int src;  // kBlock: block id; kSlot: physical slot (block * block_size + row)
  int dst;
  bool operator==(const KvCopy&) const = default;
};

// The pages of the batch's sequences after their new slots were appended, in batch order.
// Sequence i's slot s lives in block kv_indices[kv_indptr[i] + s / block_size], row
// s % block_size; its last page holds kv_last_page_len[i] used slots.
struct KvPlan {
  int block_size = 0;
  std::vector<int> kv_indptr;         // [num_seqs + 1]
  std::vector<int> kv_indices;        // [kv_indptr[num_seqs]] block ids
  std::vector<int> kv_last_page_len;  // [num_seqs], in [1, block_size] (0 for an empty sequence)
  std::vector<int> kv_len;            // [num_seqs] slots of each sequence, the new rows included
  std::vector<int> row_slots;         // [num_new_rows] physical slot of each new row, sequences in order

  int num_seqs() const { return static_cast<int>(kv_len.size()); }
};

}  // namespace specula
