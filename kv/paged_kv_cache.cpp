#include "kv/paged_kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "engine/error.h"

namespace specula {

PagedKvCache::PagedKvCache(KvLayout layout, int num_blocks) : layout_(layout) {
  SPECULA_CHECK(layout.num_layers > 0 && layout.kv_dim > 0, "kv cache: layers and kv_dim must be positive");
  SPECULA_CHECK(layout.block_size > 0, "kv cache: block size must be positive, got ", layout.block_size);
  SPECULA_CHECK(num_blocks > 0, "kv cache: number of blocks must be positive, got ", num_blocks);
  block_floats_ = static_cast<std::size_t>(layout.num_layers) * 2 * layout.block_size * layout.kv_dim;
  storage_.assign(block_floats_ * static_cast<std::size_t>(num_blocks), 0.0f);
  ref_count_.assign(num_blocks, 0);
  free_blocks_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
}

KvStats PagedKvCache::stats() const {
  KvStats s;
  s.blocks_total = static_cast<int>(ref_count_.size());
  s.blocks_in_use = s.blocks_total - static_cast<int>(free_blocks_.size());
  s.blocks_peak = blocks_peak_;
  return s;
}

PagedKvCache::Sequence& PagedKvCache::sequence(SeqId seq) {
  SPECULA_CHECK(seq >= 0 && seq < static_cast<int>(sequences_.size()) && sequences_[seq].alive,
                "kv cache: no live sequence ", seq);
  return sequences_[seq];
}

const PagedKvCache::Sequence& PagedKvCache::sequence(SeqId seq) const {
  return const_cast<PagedKvCache*>(this)->sequence(seq);
}

bool PagedKvCache::alive(SeqId seq) const {
  return seq >= 0 && seq < static_cast<int>(sequences_.size()) && sequences_[seq].alive;
}

int PagedKvCache::length(SeqId seq) const { return sequence(seq).length; }

std::span<const int> PagedKvCache::block_table(SeqId seq) const { return sequence(seq).blocks; }

PagedKvCache::SeqId PagedKvCache::create() {
  for (std::size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].alive) {
      sequences_[i] = Sequence{true, 0, {}};
      return static_cast<SeqId>(i);
    }
  }
  sequences_.push_back(Sequence{true, 0, {}});
  return static_cast<SeqId>(sequences_.size() - 1);
}

PagedKvCache::SeqId PagedKvCache::fork(SeqId parent) {
  const Sequence copy = sequence(parent);  // copy first: create() may reallocate
  SeqId child = create();
  sequences_[child] = copy;
  for (int b : copy.blocks) ++ref_count_[b];
  return child;
}

void PagedKvCache::free(SeqId seq) {
  Sequence& s = sequence(seq);
  for (int b : s.blocks) release_block(b);
  s = Sequence{};
}

float* PagedKvCache::block_data(int block) const {
  return const_cast<float*>(storage_.data()) + block_floats_ * static_cast<std::size_t>(block);
}

float* PagedKvCache::row(SeqId seq, int layer, int slot, int kv) const {
  const Sequence& s = sequence(seq);
  assert(slot >= 0 && slot < s.length && layer >= 0 && layer < layout_.num_layers);
  const int bs = layout_.block_size;
  const std::size_t offset =
      ((static_cast<std::size_t>(layer) * 2 + kv) * bs + static_cast<std::size_t>(slot % bs)) * layout_.kv_dim;
  return block_data(s.blocks[slot / bs]) + offset;
}

int PagedKvCache::allocate_block() {
  if (free_blocks_.empty()) {
    throw ResourceExhausted(detail::concat("kv cache: out of blocks (all ", ref_count_.size(),
                                           " in use; raise the KV pool size)"));
  }
  int b = free_blocks_.back();
  free_blocks_.pop_back();
  ref_count_[b] = 1;
  blocks_peak_ = std::max(blocks_peak_, stats().blocks_in_use);
  return b;
}

void PagedKvCache::release_block(int block) {
  assert(ref_count_[block] > 0);
  if (--ref_count_[block] == 0) free_blocks_.push_back(block);
}

void PagedKvCache::make_exclusive(Sequence& s, std::size_t table_index) {
  int old = s.blocks[table_index];
  if (ref_count_[old] == 1) return;
  int fresh = allocate_block();
  std::memcpy(block_data(fresh), block_data(old), block_floats_ * sizeof(float));
  release_block(old);
  s.blocks[table_index] = fresh;
}

void PagedKvCache::append_slots(SeqId seq, int n) {
  SPECULA_CHECK(n >= 0, "kv cache: cannot append ", n, " slots");
  Sequence& s = sequence(seq);
  const int bs = layout_.block_size;
  const int new_length = s.length + n;
  const int blocks_needed = (new_length + bs - 1) / bs;
  const bool partial_shared = s.length % bs != 0 && n > 0 && ref_count_[s.blocks.back()] > 1;
  const int to_allocate = blocks_needed - static_cast<int>(s.blocks.size()) + (partial_shared ? 1 : 0);
  if (to_allocate > static_cast<int>(free_blocks_.size())) {
    throw ResourceExhausted(detail::concat("kv cache: out of blocks: sequence ", seq, " needs ", to_allocate,
                                           " more, ", free_blocks_.size(), " free of ", ref_count_.size(),
                                           " (raise the KV pool size)"));
  }
  if (partial_shared) make_exclusive(s, s.blocks.size() - 1);
  while (static_cast<int>(s.blocks.size()) < blocks_needed) s.blocks.push_back(allocate_block());
  s.length = new_length;
}

void PagedKvCache::truncate(SeqId seq, int n) {
  Sequence& s = sequence(seq);
  SPECULA_CHECK(n >= 0 && n <= s.length, "kv cache: cannot truncate sequence ", seq, " of length ", s.length,
                " to ", n);
  const int bs = layout_.block_size;
  const std::size_t keep = static_cast<std::size_t>((n + bs - 1) / bs);
  while (s.blocks.size() > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = n;
}

void PagedKvCache::commit(SeqId seq, int prefix_len, std::span<const int> path) {
  Sequence& s = sequence(seq);
  SPECULA_CHECK(prefix_len >= 0 && prefix_len <= s.length, "kv cache: commit prefix ", prefix_len,
                " outside sequence of length ", s.length);
  const int bs = layout_.block_size;
  // Validate the whole path and count the shared blocks that moved entries land in before
  // touching anything: a bad path or an exhausted pool leaves seq unchanged.
  int copies = 0, last_counted = -1;
  for (std::size_t k = 0; k < path.size(); ++k) {
    SPECULA_CHECK(path[k] >= static_cast<int>(k) && prefix_len + path[k] < s.length &&
                      (k == 0 || path[k] > path[k - 1]),
                  "kv cache: commit path entry ", k, " = ", path[k], " (prefix ", prefix_len, ", length ", s.length,
                  ") is not an increasing offset inside the sequence");
    const int block = (prefix_len + static_cast<int>(k)) / bs;
    if (path[k] != static_cast<int>(k) && block != last_counted && ref_count_[s.blocks[block]] > 1) {
      ++copies;
      last_counted = block;
    }
  }
  if (copies > static_cast<int>(free_blocks_.size())) {
    throw ResourceExhausted(detail::concat("kv cache: out of blocks: commit on sequence ", seq, " needs ", copies,
                                           " more, ", free_blocks_.size(), " free of ", ref_count_.size(),
                                           " (raise the KV pool size)"));
  }
  for (std::size_t k = 0; k < path.size(); ++k) {
    const int dst = prefix_len + static_cast<int>(k);
    const int src = prefix_len + path[k];
    if (src == dst) continue;
    make_exclusive(s, static_cast<std::size_t>(dst / bs));
    for (int layer = 0; layer < layout_.num_layers; ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        std::memcpy(row(seq, layer, dst, kv), row(seq, layer, src, kv), layout_.kv_dim * sizeof(float));
      }
    }
  }
  truncate(seq, prefix_len + static_cast<int>(path.size()));
}

}  // namespace specula
