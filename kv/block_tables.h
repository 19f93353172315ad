// defines: KvStats and BlockTables, the host metadata of the paged KV cache: a pool of
// fixed-size blocks of token slots, a block table per sequence, reference counts so that
// fork() shares blocks (copy-on-write), truncate() for rollback and commit() to keep one
// accepted tree path. It never touches K/V data: operations that need data moved return
// KvCopy lists for the page storage (kv/page_storage.h) to run, and append() returns the
// KvPlan a forward reads.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "kv/kv_plan.h"

namespace specula {

struct KvStats {
  int blocks_total = 0;
  int blocks_in_use = 0;
  int blocks_peak = 0;
  int blocks_free() const { return blocks_total - blocks_in_use; }
};

class BlockTables {
 public:
  using SeqId = int;

  // A pool of `num_blocks` blocks of `block_size` slots. Throws SpeculaError on a
  // non-positive size.
  BlockTables(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(ref_count_.size()); }
  KvStats stats() const;

  SeqId create();             // a new, empty sequence
  SeqId fork(SeqId parent);   // a new sequence sharing all of parent's blocks (O(table))
  void free(SeqId seq);       // releases the sequence and its references
  bool alive(SeqId seq) const;
  int length(SeqId seq) const;
  std::span<const int> blocks(SeqId seq) const;  // the block table
  int ref_count(int block) const { return ref_count_[static_cast<std::size_t>(block)]; }

  // Appends counts[i] slots to seqs[i] (distinct live sequences), all or nothing: when the
  // pool cannot supply every block, throws ResourceExhausted and leaves every table as it
  // was. A shared, partly filled last block about to be written is replaced by a copy
  // (a kBlock entry appended to `copies`). Returns the batch's page lists and new slots.
  KvPlan append(std::span<const SeqId> seqs, std::span<const int> counts, std::vector<KvCopy>& copies);
  // The page lists of `seqs` as they stand (no new rows).
  KvPlan plan(std::span<const SeqId> seqs) const;

  // Rolls seq back to its first n slots, returning blocks no longer used.
  void truncate(SeqId seq, int n);
  // After a tree verification: slots prefix_len + path[k] become slots prefix_len + k, then
  // seq is truncated to prefix_len + path.size(). `path` holds offsets relative to prefix_len,
  // strictly increasing. Moved entries become kSlot copies (after the kBlock copies that make
  // their destination blocks exclusive). A bad path or an exhausted pool (ResourceExhausted)
  // leaves seq unchanged and appends nothing.
  void commit(SeqId seq, int prefix_len, std::span<const int> path, std::vector<KvCopy>& copies);

 private:
  struct Sequence {
    bool alive = false;
    int length = 0;
    std::vector<int> blocks;
  };

  int allocate_block();
  void release_block(int block);
  void make_exclusive(Sequence& s, std::size_t table_index, std::vector<KvCopy>& copies);
  void add_pages(const Sequence& s, KvPlan& plan) const;
  Sequence& sequence(SeqId seq);
  const Sequence& sequence(SeqId seq) const;

  int block_size_;
  std::vector<int> ref_count_;        // [num_blocks]
  std::vector<int> free_blocks_;      // stack of free block ids
  std::vector<Sequence> sequences_;   // indexed by SeqId; dead entries are reused
  int blocks_peak_ = 0;
  std::vector<std::pair<int, int>> simulated_refs_;  // append()'s scratch
};

}  // namespace specula
