// defines: KvLayout and PagedKvCache, the paged key/value cache every forward pass reads
// and writes: fixed-size blocks of token slots (all layers per block), a block table per
// sequence, reference-counted blocks so fork() is copy-on-write, truncate() for rollback
// and commit() to keep one accepted path of a verification tree.
//
// Storage of one block: [num_layers][2 (K, V)][block_size][kv_dim] floats. Slot s of a
// sequence lives in block table[s / block_size] at row s % block_size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace specula {

struct KvLayout {
  int num_layers = 0;
  int kv_dim = 0;      // num_key_value_heads * head_dim
  int block_size = 16; // token slots per block
};

struct KvStats {
  int blocks_total = 0;
  int blocks_in_use = 0;
  int blocks_peak = 0;
  int blocks_free() const { return blocks_total - blocks_in_use; }
};

class PagedKvCache {
 public:
  using SeqId = int;

  // A pool of `num_blocks` blocks. Throws SpeculaError on a non-positive size.
  PagedKvCache(KvLayout layout, int num_blocks);

  const KvLayout& layout() const { return layout_; }
  KvStats stats() const;

  SeqId create();             // a new, empty sequence
  SeqId fork(SeqId parent);   // a new sequence sharing all of parent's blocks (O(table))
  void free(SeqId seq);       // releases the sequence and its references
  bool alive(SeqId seq) const;
  int length(SeqId seq) const;

  // Extends seq by n slots whose contents are then written by the caller. Copies the
  // partly filled last block first if it is shared (copy-on-write). Throws
  // ResourceExhausted, leaving seq unchanged, when the pool cannot supply the blocks.
  void append_slots(SeqId seq, int n);
  // Rolls seq back to its first n slots, returning blocks no longer used.
  void truncate(SeqId seq, int n);
  // After a tree verification: slots prefix_len + path[k] become slots prefix_len + k,
  // then seq is truncated to prefix_len + path.size(). `path` holds offsets relative to
  // prefix_len, strictly increasing (topological order). Only moved entries are copied.
  void commit(SeqId seq, int prefix_len, std::span<const int> path);

  // Row pointers, [kv_dim] floats each. Writable rows must belong to slots appended since
  // the last fork (append_slots made their blocks exclusive).
  float* key(SeqId seq, int layer, int slot) { return row(seq, layer, slot, 0); }
  float* value(SeqId seq, int layer, int slot) { return row(seq, layer, slot, 1); }
  const float* key(SeqId seq, int layer, int slot) const { return row(seq, layer, slot, 0); }
  const float* value(SeqId seq, int layer, int slot) const { return row(seq, layer, slot, 1); }

  // For tests: block ids and reference counts.
  std::span<const int> block_table(SeqId seq) const;
  int ref_count(int block) const { return ref_count_[block]; }

 private:
  struct Sequence {
    bool alive = false;
    int length = 0;
    std::vector<int> blocks;
  };

  float* row(SeqId seq, int layer, int slot, int kv) const;
  float* block_data(int block) const;
  int allocate_block();
  void release_block(int block);
  void make_exclusive(Sequence& s, std::size_t table_index);
  Sequence& sequence(SeqId seq);
  const Sequence& sequence(SeqId seq) const;

  KvLayout layout_;
  std::size_t block_floats_;          // floats per block
  std::vector<float> storage_;        // [num_blocks][block_floats_]
  std::vector<int> ref_count_;        // [num_blocks]
  std::vector<int> free_blocks_;      // stack of free block ids
  std::vector<Sequence> sequences_;   // indexed by SeqId; dead entries are reused
  int blocks_peak_ = 0;
};

}  // namespace specula
