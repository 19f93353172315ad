// The engine seam's batch invariance across composition, bit for bit: for each bundled model,
// the logits of one sequence's rows are the same whether it runs alone or in one forward with
// 1 to 31 other sequences of other lengths and kinds (prefill chunks, decode rows, one-shot
// trees, trees grown level by level over earlier cached nodes), in random order, with logits
// wanted for all, the last or none of the others' rows; for block sizes 1, 16 and 64, with 1
// and 2 threads, on each instruction set this CPU runs. Also: the planner's visibility CSR on
// a hand-built batch, and a batch that does not fit the pool changes no sequence.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/error.h"
#include "engine/batch.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/forward.h"
#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

enum class Kind { kPrefill, kDecode, kTree, kGrownTree };

// One sequence's part of a batch, with the arrays its SequenceRows points into.
struct Part {
  Kind kind;
  int base;  // index of the prefilled sequence it forks
  std::vector<int> tokens, positions, parents;
  std::vector<int> first_tokens, first_positions, first_parents;  // kGrownTree: the level run before
  RowLogits logits = RowLogits::kAll;
};

Part random_part(std::mt19937& rng, int num_bases, const std::vector<int>& base_lengths, int vocab) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Part p;
  p.kind = static_cast<Kind>(pick(0, 3));
  p.base = pick(0, num_bases - 1);
  const int len = base_lengths[static_cast<std::size_t>(p.base)];
  auto random_tree = [&](int n, int earlier, std::vector<int>& depth_of) {
    std::vector<int> parents;
    for (int i = 0; i < n; ++i) {
      const int t = earlier + i;
      parents.push_back(t == 0 ? -1 : pick(-1, t - 1));
      depth_of.push_back(parents.back() < 0 ? 0 : depth_of[static_cast<std::size_t>(parents.back())] + 1);
    }
    return parents;
  };
  const int n = p.kind == Kind::kDecode ? 1 : p.kind == Kind::kPrefill ? pick(2, 12) : pick(2, 8);
  for (int i = 0; i < n; ++i) p.tokens.push_back(pick(3, vocab - 1));
  if (p.kind == Kind::kPrefill || p.kind == Kind::kDecode) {
    for (int i = 0; i < n; ++i) p.positions.push_back(len + i);
  } else {
    std::vector<int> depth;
    if (p.kind == Kind::kGrownTree) {
      const int first = pick(1, 4);
      for (int i = 0; i < first; ++i) p.first_tokens.push_back(pick(3, vocab - 1));
      p.first_parents = random_tree(first, 0, depth);
      for (int d : depth) p.first_positions.push_back(len + d);
    }
    const std::vector<int> more = random_tree(n, static_cast<int>(p.first_tokens.size()), depth);
    p.parents = p.first_parents;
    p.parents.insert(p.parents.end(), more.begin(), more.end());
    for (std::size_t i = p.first_tokens.size(); i < depth.size(); ++i) p.positions.push_back(len + depth[i]);
  }
  p.logits = static_cast<RowLogits>(pick(0, 2));
  return p;
}

// Forks the part's base and runs what precedes the batch (a grown tree's first level).
int prepare(test::Engine& e, const std::vector<int>& bases, const Part& p) {
  const int seq = e.cache.fork(bases[static_cast<std::size_t>(p.base)]);
  if (p.kind == Kind::kGrownTree) {
    std::vector<float> unused(p.first_tokens.size() * static_cast<std::size_t>(e.config().vocab_size));
    e.forward(seq, {p.first_tokens, p.first_positions, p.first_parents, true}, unused);
  }
  return seq;
}

SequenceRows rows_of(const Part& p, int seq) { return {seq, p.tokens, p.positions, p.parents, p.logits}; }

void check_composition(const std::string& name, cpu::MatmulIsa isa, int block_size, int threads, uint32_t seed) {
  const Model& model = test::shared_backend(test::model_dir(name)).model();
  const cpu::CpuBackend backend(model, std::nullopt, isa);
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(seed);
  test::Engine e(backend, block_size, 4096 / block_size + 256);
  omp_set_num_threads(threads);

  // Prefilled sequences of different lengths (some mid-block), the bases every part forks.
  std::vector<int> bases, base_lengths;
  for (int length : {5, 23, 40, 61}) {
    std::vector<int> tokens(static_cast<std::size_t>(length)), positions(tokens.size());
    for (int& t : tokens) t = std::uniform_int_distribution<int>(3, vocab - 1)(rng);
    std::iota(positions.begin(), positions.end(), 0);
    bases.push_back(e.cache.create());
    std::vector<float> last(static_cast<std::size_t>(vocab));
    e.forward(bases.back(), {tokens, positions, {}, false}, last);
    base_lengths.push_back(length);
  }
  const int trials = test::kSanitized ? 2 : 4;
  for (int trial = 0; trial < trials; ++trial) {
    const Part subject = [&] {  // every kind is the subject once
      Part p;
      do p = random_part(rng, 4, base_lengths, vocab);
      while (p.kind != static_cast<Kind>(trial % 4));
      p.logits = RowLogits::kAll;
      return p;
    }();
    INFO("trial " << trial << ", subject kind " << static_cast<int>(subject.kind) << ", " << subject.tokens.size()
                  << " rows");
    // Alone.
    const int alone_seq = prepare(e, bases, subject);
    std::vector<float> alone(subject.tokens.size() * static_cast<std::size_t>(vocab));
    e.context().run(rows_of(subject, alone_seq), alone);

    // Among 1..31 others, at a random place.
    const int others = std::uniform_int_distribution<int>(1, 31)(rng);
    std::vector<Part> parts;
    for (int i = 0; i < others; ++i) parts.push_back(random_part(rng, 4, base_lengths, vocab));
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, parts.size())(rng);
    parts.insert(parts.begin() + static_cast<long>(at), subject);
    std::vector<int> seqs;
    std::vector<SequenceRows> batch;
    for (const Part& p : parts) seqs.push_back(prepare(e, bases, p));
    for (std::size_t i = 0; i < parts.size(); ++i) batch.push_back(rows_of(parts[i], seqs[i]));
    std::vector<float> logits(static_cast<std::size_t>(logit_rows(batch)) * vocab);
    e.context().run(batch, logits);
    const int offset = logit_rows(std::span(batch).first(at));
    INFO(others << " others, subject at " << at);
    CHECK(std::memcmp(alone.data(), &logits[static_cast<std::size_t>(offset) * vocab], alone.size() * sizeof(float)) == 0);
    for (int seq : seqs) e.cache.free(seq);
    e.cache.free(alone_seq);
  }
  for (int seq : bases) e.cache.free(seq);
  CHECK(e.cache.stats().blocks_in_use == 0);
  omp_set_num_threads(1);
}

}  // namespace

TEST_CASE("batch: a sequence's logits are bitwise the same alone and among 1-31 others of any kind",
          "[engine][batch][invariance]") {
  uint32_t seed = 1;
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"})
    for (cpu::MatmulIsa isa : cpu::supported_matmul_isas())
      for (int block_size : {1, 16, 64})
        for (int threads : {1, 2}) {
          if (test::kSanitized && (threads == 2 || isa != cpu::matmul_isa())) continue;
          INFO(name << ", " << cpu::isa_name(isa) << ", block size " << block_size << ", " << threads << " threads");
          check_composition(name, isa, block_size, threads, seed++);
        }
}

TEST_CASE("batch: the planner's visibility CSR and logit rows", "[engine][batch]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  KvCache cache(backend.model().kv_layout(4), 16);
  const int a = cache.create(), b = cache.create();
  cache.append_slots(a, 5);  // a: 5 cached slots, then a 3-row causal chunk
  cache.append_slots(b, 7);  // b: 7 cached, the last 2 a tree's first level (nodes 0, 1)
  const std::vector<int> chunk = {10, 11, 12}, chunk_pos = {5, 6, 7};
  const std::vector<int> tree = {20, 21}, tree_pos = {7, 7}, parents = {-1, -1, 0, 1};  // nodes 2 under 0, 3 under 1
  const std::vector<SequenceRows> parts = {{a, chunk, chunk_pos, {}, RowLogits::kLast},
                                           {b, tree, tree_pos, parents, RowLogits::kAll}};
  const RaggedBatch batch = plan_batch(parts, cache.tables(), backend.config());
  CHECK(batch.seqs == std::vector<int>{a, b});
  CHECK(batch.row_indptr == std::vector<int>{0, 3, 5});
  CHECK(batch.visible_prefix == std::vector<int>{5, 5});  // b's tree starts at slot 7 - 2
  // a's rows are causal (empty lists); b's node 2 sees slots 5 (node 0) and 7, node 3 sees 6 and 8.
  CHECK(batch.mask_indptr == std::vector<int>{0, 0, 0, 0, 2, 4});
  CHECK(batch.mask_indices == std::vector<int>{5, 7, 6, 8});
  CHECK(batch.logit_rows == std::vector<int>{2, 3, 4});
  CHECK(logit_rows(parts) == 3);

  const std::vector<int> bad_parents = {-1, 1};
  CHECK_THROWS_WITH(plan_batch(std::vector<SequenceRows>{{a, tree, tree_pos, bad_parents}}, cache.tables(), backend.config()),
                    Catch::Contains("topological"));
  CHECK_THROWS_WITH(plan_batch(std::vector<SequenceRows>{parts[0], parts[0]}, cache.tables(), backend.config()),
                    Catch::Contains("appears twice"));
}

TEST_CASE("batch: a batch the pool cannot hold fails whole and changes no sequence", "[engine][batch][kv]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  test::Engine e(backend, 4, 5);  // 20 slots
  const int a = e.cache.create(), b = e.cache.create();
  const std::vector<int> tokens(10, 7), positions = [] {
    std::vector<int> p(10);
    std::iota(p.begin(), p.end(), 0);
    return p;
  }();
  std::vector<float> logits(2 * static_cast<std::size_t>(backend.config().vocab_size));
  e.forward(a, {std::span(tokens).first(6), std::span(positions).first(6), {}, false}, std::span(logits).first(logits.size() / 2));
  // a needs 1 more block for 6 more rows, b 3 for 10: 4 > 3 free (each alone would fit).
  const std::vector<SequenceRows> parts = {{a, std::span(tokens).first(6), std::span(positions).subspan(4, 6), {}, RowLogits::kLast},
                                           {b, tokens, positions, {}, RowLogits::kLast}};
  CHECK_THROWS_AS(e.context().run(parts, logits), ResourceExhausted);
  CHECK(e.cache.length(a) == 6);
  CHECK(e.cache.length(b) == 0);
  CHECK(e.cache.stats().blocks_in_use == 2);
}

}  // namespace specula
