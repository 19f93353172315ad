// defines: KvCache, a pool of paged KV memory as callers use it: the block tables
// (kv/block_tables.h) and the page storage (kv/page_storage.h) of one model, with the copy
// lists that fork / truncate / commit produce held until the next batch runs them once; and,
// when asked, a host store of each slot's target states beside its keys and values (what
// draft heads read), carried by the same copies.
#pragma once

#include <span>
#include <vector>


#include "kv/block_tables.h"
#include "kv/page_storage.h"

namespace specula {

class KvCache {
 public:
  using SeqId = BlockTables::SeqId;

  // A pool of `num_blocks` blocks of layout.block_size slots.
  KvCache(KvLayout layout, int num_blocks);

  const KvLayout& layout() const { return storage_.layout(); }
  KvStats stats() const { return tables_.stats(); }
  const BlockTables& tables() const { return tables_; }

  SeqId create() { return tables_.create(); }
  SeqId fork(SeqId parent) { return tables_.fork(parent); }
  void free(SeqId seq) { tables_.free(seq); }
  bool alive(SeqId seq) const { return tables_.alive(seq); }
  int length(SeqId seq) const { return tables_.length(seq); }
  std::span<const int> block_table(SeqId seq) const { return tables_.blocks(seq); }
  int ref_count(int block) const { return tables_.ref_count(block); }
  void truncate(SeqId seq, int n) { tables_.truncate(seq, n); }
  // BlockTables::commit; the moves run with the next batch (or the next row access).
  void commit(SeqId seq, int prefix_len, std::span<const int> path) { tables_.commit(seq, prefix_len, path, pending_); }

  // The start of a forward: appends counts[i] slots to seqs[i] (all or nothing, see
  // BlockTables::append), runs every pending copy, and returns the plan whose row_slots the
  // forward writes. The storage is then current.
  KvPlan prepare(std::span<const SeqId> seqs, std::span<const int> counts);
  PageStorage& storage() { return storage_; }

  // From now on every slot also holds `width` floats of states (its row's residual stream at
  // `layers`, StateTaps: the writer is ForwardContext::run), carried by fork / truncate /
  // commit like its keys and values. Asking again for the same layers does nothing; for other
  // layers (or width) it is an error: one store per cache.
  void keep_states(std::vector<int> layers, int width);
  std::span<const int> state_layers() const { return state_layers_; }
  int state_width() const { return state_width_; }
  // The [state_width()] states of physical slot `slot` (block * block_size + row), to write.
  std::span<float> physical_states(int slot);
  // The [state_width()] states of seq's slot `slot` (pending copies run first).
  std::span<const float> states(SeqId seq, int slot);

  // One sequence extended by n slots that the caller writes through key() / value().
  void append_slots(SeqId seq, int n);
  // The [kv_dim] key / value row of `slot` of seq in `layer` (pending copies run first); f32 pages only.
  float* key(SeqId seq, int layer, int slot) { return row(seq, layer, slot, 0); }
  float* value(SeqId seq, int layer, int slot) { return row(seq, layer, slot, 1); }

 private:
  float* row(SeqId seq, int layer, int slot, int kv);
  void run_pending();

  BlockTables tables_;
  PageStorage storage_;
  std::vector<KvCopy> pending_;  // copies not yet run, in order
  std::vector<int> state_layers_;  // keep_states()
  int state_width_ = 0;
  std::vector<float> states_;      // [num_blocks * block_size, state_width_]
};

}  // namespace specula
