// Property test of the paged KV cache (block tables + page storage + deferred copy lists)
// against a naive model (a plain vector of KV rows per sequence): thousands of random
// operation sequences of create / append of one or two sequences in one batch (rows written
// at the plan's slots, which must be where the block tables put them) / fork / truncate /
// commit of random increasing paths / free, on small pools so that running out of blocks is
// common. After every operation:
//  - every live sequence's length and every K and V row equal the naive model's (so a write
//    after a fork never shows in the other sequence, and commit moved the right rows);
//  - each block's reference count equals the number of block-table entries naming it, the
//    table has ceil(length / block_size) entries, blocks in use + free == total and in use
//    == the number of distinct referenced blocks (nothing lost, nothing shared wrongly);
//  - the page lists (kv_indices, kv_len, kv_last_page_len) equal the block tables;
//  - a ResourceExhausted append or commit left its sequences exactly as they were.
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "kv/kv_cache.h"

namespace specula {
namespace {

constexpr int kLayers = 2;
constexpr int kKvDim = 3;

// One slot of the naive model: [layer][K/V][kv_dim].
using Slot = std::vector<float>;

class Harness {
 public:
  Harness(int block_size, int num_blocks, uint32_t seed)
      : cache_(KvLayout{kLayers, 1, kKvDim, block_size}, num_blocks), rng_(seed) {}

  void step() {
    const int op = pick(0, 9);
    if (naive_.empty() || op == 0) {
      if (naive_.size() < 6) naive_[cache_.create()] = {};
      return;
    }
    const int seq = random_seq();
    if (op <= 2) {
      append({seq}, {pick(0, 2 * cache_.layout().block_size + 1)});
    } else if (op == 3) {  // two sequences in one batch, as a batched forward appends them
      const int other = random_seq();
      if (other == seq) return append({seq}, {pick(0, 3)});
      append({seq, other}, {pick(0, cache_.layout().block_size + 1), pick(1, 3)});
    } else if (op == 4) {
      if (naive_.size() < 6) {
        const int child = cache_.fork(seq);
        naive_[child] = naive_.at(seq);
      }
    } else if (op <= 6) {
      const int n = pick(0, length(seq));
      cache_.truncate(seq, n);
      naive_[seq].resize(static_cast<std::size_t>(n));
    } else if (op <= 8) {
      commit(seq);
    } else {
      cache_.free(seq);
      naive_.erase(seq);
    }
  }

  void check() { REQUIRE(first_violation() == ""); }

  // "" when the cache agrees with the naive model and its accounting is consistent, else the
  // first disagreement found.
  std::string first_violation() {
    const int bs = cache_.layout().block_size;
    const KvStats st = cache_.stats();
    std::vector<int> references(static_cast<std::size_t>(st.blocks_total), 0);  // table entries per block
    for (const auto& [seq, rows] : naive_) {
      const std::string where = "sequence " + std::to_string(seq) + ": ";
      if (!cache_.alive(seq)) return where + "not alive";
      if (cache_.length(seq) != static_cast<int>(rows.size())) return where + "length differs";
      const auto table = cache_.block_table(seq);
      if (table.size() != (rows.size() + bs - 1) / bs) return where + "block table size differs";
      if (std::set<int>(table.begin(), table.end()).size() != table.size()) return where + "block listed twice";
      for (int b : table) ++references[static_cast<std::size_t>(b)];
      if (auto m = first_mismatch(seq, rows); !m.empty()) return where + m + " differs";
    }
    // The page lists a forward would read agree with the block tables.
    std::vector<int> seqs;
    for (const auto& entry : naive_) seqs.push_back(entry.first);
    const KvPlan plan = cache_.tables().plan(seqs);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const auto table = cache_.block_table(seqs[i]);
      const std::vector<int> pages(plan.kv_indices.begin() + plan.kv_indptr[i], plan.kv_indices.begin() + plan.kv_indptr[i + 1]);
      const int len = cache_.length(seqs[i]);
      if (pages != std::vector<int>(table.begin(), table.end()) || plan.kv_len[i] != len ||
          plan.kv_last_page_len[i] != (len == 0 ? 0 : len - (static_cast<int>(table.size()) - 1) * bs))
        return "sequence " + std::to_string(seqs[i]) + ": page list differs from its block table";
    }
    int referenced = 0;
    for (int b = 0; b < st.blocks_total; ++b) {
      if (cache_.ref_count(b) != references[static_cast<std::size_t>(b)])
        return "block " + std::to_string(b) + ": ref_count " + std::to_string(cache_.ref_count(b)) + " but " +
               std::to_string(references[static_cast<std::size_t>(b)]) + " table entries";
      referenced += references[static_cast<std::size_t>(b)] > 0;
    }
    if (st.blocks_in_use != referenced) return "blocks_in_use differs from the referenced blocks";
    if (st.blocks_in_use + st.blocks_free() != st.blocks_total) return "in use + free != total";
    if (st.blocks_peak < st.blocks_in_use || st.blocks_peak > st.blocks_total) return "blocks_peak out of range";
    return "";
  }

  // "" when every K and V row of seq equals the naive rows, else where they first differ.
  std::string first_mismatch(int seq, const std::vector<Slot>& rows) {
    for (std::size_t s = 0; s < rows.size(); ++s) {
      for (int l = 0; l < kLayers; ++l) {
        const float* k = cache_.key(seq, l, static_cast<int>(s));
        const float* v = cache_.value(seq, l, static_cast<int>(s));
        for (int d = 0; d < kKvDim; ++d) {
          if (k[d] != rows[s][(l * 2 + 0) * kKvDim + d] || v[d] != rows[s][(l * 2 + 1) * kKvDim + d])
            return "slot " + std::to_string(s) + ", layer " + std::to_string(l);
        }
      }
    }
    return "";
  }

  void free_all() {
    for (const auto& [seq, rows] : naive_) cache_.free(seq);
    naive_.clear();
  }

  const KvCache& cache() const { return cache_; }
  int exhausted() const { return exhausted_; }
  int commits_moving() const { return commits_moving_; }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int length(int seq) const { return static_cast<int>(naive_.at(seq).size()); }
  int random_seq() {
    auto it = naive_.begin();
    std::advance(it, pick(0, static_cast<int>(naive_.size()) - 1));
    return it->first;
  }

  // Appends counts[i] slots to seqs[i] in one batch (KvCache::prepare) and writes them through
  // the plan's row slots; an exhausted pool must leave every sequence of the batch as it was.
  void append(const std::vector<int>& seqs, const std::vector<int>& counts) {
    std::vector<std::vector<int>> tables_before;
    for (int seq : seqs) tables_before.emplace_back(cache_.block_table(seq).begin(), cache_.block_table(seq).end());
    KvPlan plan;
    try {
      plan = cache_.prepare(seqs, counts);
    } catch (const ResourceExhausted&) {
      ++exhausted_;
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        REQUIRE(cache_.length(seqs[i]) == length(seqs[i]));
        REQUIRE(std::vector<int>(cache_.block_table(seqs[i]).begin(), cache_.block_table(seqs[i]).end()) ==
                tables_before[i]);
      }
      return;
    }
    const int bs = cache_.layout().block_size;
    std::size_t new_row = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      auto& rows = naive_[seqs[i]];
      for (int k = 0; k < counts[i]; ++k, ++new_row) {
        const int s = static_cast<int>(rows.size());
        // The plan's slot for this row is where the block table puts it.
        REQUIRE(plan.row_slots[new_row] == cache_.block_table(seqs[i])[static_cast<std::size_t>(s / bs)] * bs + s % bs);
        Slot slot(static_cast<std::size_t>(kLayers * 2 * kKvDim));
        for (float& x : slot) x = static_cast<float>(next_value_++);
        for (int l = 0; l < kLayers; ++l) {
          for (int d = 0; d < kKvDim; ++d) {
            cache_.storage().row(l, 0, plan.row_slots[new_row])[d] = slot[(l * 2 + 0) * kKvDim + d];
            cache_.storage().row(l, 1, plan.row_slots[new_row])[d] = slot[(l * 2 + 1) * kKvDim + d];
          }
        }
        rows.push_back(std::move(slot));
      }
    }
    REQUIRE(new_row == plan.row_slots.size());
  }

  // A random tree-verification outcome: a prefix, then an increasing path of offsets after it.
  void commit(int seq) {
    const int len = length(seq);
    const int prefix = pick(0, len);
    std::vector<int> path;
    for (int off = 0; prefix + off < len; ++off)
      if (pick(0, 2) == 0) path.push_back(off);
    const std::vector<int> table_before(cache_.block_table(seq).begin(), cache_.block_table(seq).end());
    try {
      cache_.commit(seq, prefix, path);
    } catch (const ResourceExhausted&) {
      ++exhausted_;
      REQUIRE(cache_.length(seq) == len);
      REQUIRE(std::vector<int>(cache_.block_table(seq).begin(), cache_.block_table(seq).end()) == table_before);
      return;  // check() verifies the contents are untouched
    }
    auto& rows = naive_[seq];
    std::vector<Slot> kept(rows.begin(), rows.begin() + prefix);
    for (int off : path) kept.push_back(rows[static_cast<std::size_t>(prefix + off)]);
    for (std::size_t k = 0; k < path.size(); ++k) commits_moving_ += path[k] != static_cast<int>(k);
    rows = std::move(kept);
  }

  KvCache cache_;
  std::mt19937 rng_;
  std::map<int, std::vector<Slot>> naive_;
  int64_t next_value_ = 1;
  int exhausted_ = 0;
  int commits_moving_ = 0;
};

}  // namespace

TEST_CASE("kv: random operation sequences match a naive per-sequence cache", "[kv][property]") {
  int total_exhausted = 0, total_moving = 0;
  for (int block_size : {1, 3, 16}) {
    // Pools of 40 slots' worth of blocks (at least 4): exhaustion is frequent but not constant.
    const int num_blocks = std::max(4, 40 / block_size);
    for (uint32_t run = 0; run < 1000; ++run) {
      INFO("block size " << block_size << ", run " << run);
      Harness h(block_size, num_blocks, run * 7919u + static_cast<uint32_t>(block_size));
      for (int op = 0; op < 40; ++op) {
        h.step();
        h.check();
      }
      h.free_all();
      REQUIRE(h.cache().stats().blocks_in_use == 0);
      total_exhausted += h.exhausted();
      total_moving += h.commits_moving();
    }
  }
  // The sequences did reach the interesting states.
  CHECK(total_exhausted > 100);
  CHECK(total_moving > 1000);
}

TEST_CASE("kv: exhausting the pool fails the request and leaves other sequences intact", "[kv]") {
  KvCache cache(KvLayout{1, 1, 2, 4}, 3);
  const int a = cache.create();
  cache.append_slots(a, 6);  // blocks 2 of 3
  for (int s = 0; s < 6; ++s) cache.key(a, 0, s)[0] = static_cast<float>(s);
  const int b = cache.fork(a);
  cache.append_slots(b, 2);  // copies the shared half-full block: 3 of 3
  CHECK(cache.stats().blocks_in_use == 3);
  CHECK_THROWS_AS(cache.append_slots(b, 1), ResourceExhausted);
  CHECK_THROWS_AS(cache.append_slots(a, 3), ResourceExhausted);
  CHECK(cache.length(a) == 6);
  CHECK(cache.length(b) == 8);
  for (int s = 0; s < 6; ++s) CHECK(cache.key(a, 0, s)[0] == static_cast<float>(s));
  for (int s = 0; s < 6; ++s) CHECK(cache.key(b, 0, s)[0] == static_cast<float>(s));
  cache.free(b);
  CHECK_NOTHROW(cache.append_slots(a, 3));  // the freed block serves the next request
  cache.free(a);
  CHECK(cache.stats().blocks_in_use == 0);
  CHECK(cache.stats().blocks_peak == 3);
}

TEST_CASE("kv: fork shares blocks and copies only the partly filled block written after it", "[kv]") {
  KvCache cache(KvLayout{1, 1, 1, 4}, 8);
  const int a = cache.create();
  cache.append_slots(a, 10);  // 2 full blocks + 1 partly filled
  const int b = cache.fork(a);
  CHECK(cache.stats().blocks_in_use == 3);
  for (int i = 0; i < 3; ++i) CHECK(cache.block_table(b)[i] == cache.block_table(a)[i]);
  cache.append_slots(b, 1);
  CHECK(cache.stats().blocks_in_use == 4);  // exactly one copy
  CHECK(cache.block_table(b)[0] == cache.block_table(a)[0]);
  CHECK(cache.block_table(b)[1] == cache.block_table(a)[1]);
  CHECK(cache.block_table(b)[2] != cache.block_table(a)[2]);
  CHECK(cache.ref_count(cache.block_table(a)[0]) == 2);
  CHECK(cache.ref_count(cache.block_table(a)[2]) == 1);
}

TEST_CASE("kv: bad arguments are clear errors", "[kv]") {
  CHECK_THROWS_WITH(KvCache(KvLayout{1, 1, 1, 0}, 4), Catch::Contains("block size"));
  CHECK_THROWS_WITH(KvCache(KvLayout{1, 1, 1, 4}, 0), Catch::Contains("number of blocks"));
  KvCache cache(KvLayout{1, 1, 1, 4}, 4);
  const int a = cache.create();
  cache.append_slots(a, 5);
  for (int s = 0; s < 5; ++s) cache.key(a, 0, s)[0] = static_cast<float>(s);
  CHECK_THROWS_WITH(cache.truncate(a, 6), Catch::Contains("cannot truncate"));
  CHECK_THROWS_WITH(cache.commit(a, 2, std::vector<int>{1, 1}), Catch::Contains("commit path"));
  CHECK_THROWS_WITH(cache.commit(a, 2, std::vector<int>{3}), Catch::Contains("commit path"));
  CHECK_THROWS_WITH(cache.commit(a, 6, std::vector<int>{}), Catch::Contains("commit prefix"));
  CHECK(cache.length(a) == 5);  // rejected commits change nothing, not even the valid first entries
  for (int s = 0; s < 5; ++s) CHECK(cache.key(a, 0, s)[0] == static_cast<float>(s));
  cache.free(a);
  CHECK_THROWS_WITH(cache.length(a), Catch::Contains("no live sequence"));
  CHECK_THROWS_WITH(cache.fork(a), Catch::Contains("no live sequence"));
}

}  // namespace specula
