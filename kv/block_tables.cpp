#include "kv/block_tables.h"

#include <algorithm>
#include <cassert>

#include "base/error.h"

namespace specula {

BlockTables::BlockTables(int num_blocks, int block_size) : block_size_(block_size) {
  SPECULA_CHECK(block_size > 0, "kv cache: block size must be positive, got ", block_size);
  SPECULA_CHECK(num_blocks > 0, "kv cache: number of blocks must be positive, got ", num_blocks);
  ref_count_.assign(static_cast<std::size_t>(num_blocks), 0);
  free_blocks_.reserve(static_cast<std::size_t>(num_blocks));
  for (int b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
}

KvStats BlockTables::stats() const {
  KvStats s;
  s.blocks_total = num_blocks();
  s.blocks_in_use = s.blocks_total - static_cast<int>(free_blocks_.size());
  s.blocks_peak = blocks_peak_;
  return s;
}

BlockTables::Sequence& BlockTables::sequence(SeqId seq) {
  SPECULA_CHECK(alive(seq), "kv cache: no live sequence ", seq);
  return sequences_[static_cast<std::size_t>(seq)];
}

const BlockTables::Sequence& BlockTables::sequence(SeqId seq) const {
  return const_cast<BlockTables*>(this)->sequence(seq);
}

bool BlockTables::alive(SeqId seq) const {
  return seq >= 0 && seq < static_cast<int>(sequences_.size()) && sequences_[static_cast<std::size_t>(seq)].alive;
}

int BlockTables::length(SeqId seq) const { return sequence(seq).length; }

std::span<const int> BlockTables::blocks(SeqId seq) const { return sequence(seq).blocks; }

BlockTables::SeqId BlockTables::create() {
  for (std::size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].alive) {
      sequences_[i] = Sequence{true, 0, {}};
      return static_cast<SeqId>(i);
    }
  }
  sequences_.push_back(Sequence{true, 0, {}});
  return static_cast<SeqId>(sequences_.size() - 1);
}

BlockTables::SeqId BlockTables::fork(SeqId parent) {
  const Sequence copy = sequence(parent);  // copy first: create() may reallocate
  const SeqId child = create();
  sequences_[static_cast<std::size_t>(child)] = copy;
  for (int b : copy.blocks) ++ref_count_[static_cast<std::size_t>(b)];
  return child;
}

void BlockTables::free(SeqId seq) {
  Sequence& s = sequence(seq);
  for (int b : s.blocks) release_block(b);
  s = Sequence{};
}

int BlockTables::allocate_block() {
  assert(!free_blocks_.empty());  // callers count the blocks they need first
  const int b = free_blocks_.back();
  free_blocks_.pop_back();
  ref_count_[static_cast<std::size_t>(b)] = 1;
  blocks_peak_ = std::max(blocks_peak_, stats().blocks_in_use);
  return b;
}

void BlockTables::release_block(int block) {
  assert(ref_count_[static_cast<std::size_t>(block)] > 0);
  if (--ref_count_[static_cast<std::size_t>(block)] == 0) free_blocks_.push_back(block);
}

void BlockTables::make_exclusive(Sequence& s, std::size_t table_index, std::vector<KvCopy>& copies) {
  const int old = s.blocks[table_index];
  if (ref_count_[static_cast<std::size_t>(old)] == 1) return;
  const int fresh = allocate_block();
  copies.push_back({KvCopy::Kind::kBlock, old, fresh});
  release_block(old);
  s.blocks[table_index] = fresh;
}

void BlockTables::add_pages(const Sequence& s, KvPlan& plan) const {
  plan.kv_indices.insert(plan.kv_indices.end(), s.blocks.begin(), s.blocks.end());
  plan.kv_indptr.push_back(static_cast<int>(plan.kv_indices.size()));
  plan.kv_len.push_back(s.length);
  plan.kv_last_page_len.push_back(s.length == 0 ? 0 : s.length - (static_cast<int>(s.blocks.size()) - 1) * block_size_);
}

KvPlan BlockTables::plan(std::span<const SeqId> seqs) const {
  KvPlan plan;
  plan.block_size = block_size_;
  plan.kv_indptr.assign(1, 0);
  for (SeqId seq : seqs) add_pages(sequence(seq), plan);
  return plan;
}

KvPlan BlockTables::append(std::span<const SeqId> seqs, std::span<const int> counts, std::vector<KvCopy>& copies) {
  SPECULA_CHECK(seqs.size() == counts.size(), "kv cache: ", seqs.size(), " sequences but ", counts.size(), " counts");
  const int bs = block_size_;
  // Count every block the batch needs before touching anything, simulating the reference
  // counts so that two forks sharing one partly filled block are counted exactly.
  long to_allocate = 0;
  std::vector<std::pair<int, int>>& refs = simulated_refs_;  // block -> reference count after the copies counted so far
  refs.clear();
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = sequence(seqs[i]);
    SPECULA_CHECK(counts[i] >= 0, "kv cache: cannot append ", counts[i], " slots");
    SPECULA_CHECK(std::count(seqs.begin(), seqs.begin() + static_cast<long>(i), seqs[i]) == 0,
                  "kv cache: sequence ", seqs[i], " appears twice in one batch");
    const long new_length = static_cast<long>(s.length) + counts[i];
    SPECULA_CHECK(new_length <= 1L << 30, "kv cache: sequence ", seqs[i], " would hold ", new_length, " slots");
    to_allocate += (new_length + bs - 1) / bs - static_cast<long>(s.blocks.size());
    if (s.length % bs != 0 && counts[i] > 0) {
      const int last = s.blocks.back();
      auto it = std::find_if(refs.begin(), refs.end(), [last](const auto& entry) { return entry.first == last; });
      if (it == refs.end()) it = refs.insert(refs.end(), {last, ref_count(last)});
      int& r = it->second;
      if (r > 1) {
        ++to_allocate;
        --r;
      }
    }
  }
  if (to_allocate > static_cast<long>(free_blocks_.size())) {
    throw ResourceExhausted(detail::concat("kv cache: out of blocks: the batch needs ", to_allocate, " more, ",
                                           free_blocks_.size(), " free of ", num_blocks(),
                                           " (raise the KV pool size)"));
  }
  KvPlan plan;
  plan.block_size = bs;
  plan.kv_indptr.assign(1, 0);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = sequence(seqs[i]);
    const int n = counts[i];
    if (s.length % bs != 0 && n > 0) make_exclusive(s, s.blocks.size() - 1, copies);
    const int new_length = s.length + n;
    while (static_cast<int>(s.blocks.size()) * bs < new_length) s.blocks.push_back(allocate_block());
    for (int slot = s.length; slot < new_length; ++slot)
      plan.row_slots.push_back(s.blocks[static_cast<std::size_t>(slot / bs)] * bs + slot % bs);
    s.length = new_length;
    add_pages(s, plan);
  }
  return plan;
}

void BlockTables::truncate(SeqId seq, int n) {
  Sequence& s = sequence(seq);
  SPECULA_CHECK(n >= 0 && n <= s.length, "kv cache: cannot truncate sequence ", seq, " of length ", s.length,
                " to ", n);
  const std::size_t keep = static_cast<std::size_t>((n + block_size_ - 1) / block_size_);
  while (s.blocks.size() > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = n;
}

void BlockTables::commit(SeqId seq, int prefix_len, std::span<const int> path, std::vector<KvCopy>& copies) {
  Sequence& s = sequence(seq);
  SPECULA_CHECK(prefix_len >= 0 && prefix_len <= s.length, "kv cache: commit prefix ", prefix_len,
                " outside sequence of length ", s.length);
  const int bs = block_size_;
  // Validate the whole path and count the shared blocks that moved entries land in before
  // touching anything: a bad path or an exhausted pool leaves seq unchanged.
  int needed = 0, last_counted = -1;
  for (std::size_t k = 0; k < path.size(); ++k) {
    SPECULA_CHECK(path[k] >= static_cast<int>(k) && path[k] < s.length - prefix_len &&
                      (k == 0 || path[k] > path[k - 1]),
                  "kv cache: commit path entry ", k, " = ", path[k], " (prefix ", prefix_len, ", length ", s.length,
                  ") is not an increasing offset inside the sequence");
    const int block = (prefix_len + static_cast<int>(k)) / bs;
    if (path[k] != static_cast<int>(k) && block != last_counted &&
        ref_count(s.blocks[static_cast<std::size_t>(block)]) > 1) {
      ++needed;
      last_counted = block;
    }
  }
  if (needed > static_cast<int>(free_blocks_.size())) {
    throw ResourceExhausted(detail::concat("kv cache: out of blocks: commit on sequence ", seq, " needs ", needed,
                                           " more, ", free_blocks_.size(), " free of ", num_blocks(),
                                           " (raise the KV pool size)"));
  }
  for (std::size_t k = 0; k < path.size(); ++k) {
    const int dst = prefix_len + static_cast<int>(k);
    const int src = prefix_len + path[k];
    if (src == dst) continue;
    make_exclusive(s, static_cast<std::size_t>(dst / bs), copies);
    const auto physical = [&](int slot) { return s.blocks[static_cast<std::size_t>(slot / bs)] * bs + slot % bs; };
    copies.push_back({KvCopy::Kind::kSlot, physical(src), physical(dst)});
  }
  truncate(seq, prefix_len + static_cast<int>(path.size()));
}

}  // namespace specula
