// Batch invariance of the CPU forward pass on the real models, bit for bit:
//  (a) one causal prefill of a prompt with all logits == prefill of its first k tokens, then
//      the rest decoded one token at a time;
//  (b) a tree forward (parents, positions prefix + depth) == for every node, a causal forward
//      of that node's root-to-node path on a fork of the prefix;
//  (c) committing an accepted tree path and decoding on == decoding the path causally.
// Greedy speculative decoding is exactly plain greedy decoding only because of these.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

const Backend& shared_model(const std::string& name) { return test::shared_backend(test::model_dir(name)); }

std::vector<int> reference_prompt(const std::string& model, std::size_t index) {
  std::ifstream in(test::source_path("tests/data/hf-greedy.json"));
  REQUIRE(in);
  return nlohmann::json::parse(in).at("models").at(model).at(index).at("prompt_ids").get<std::vector<int>>();
}

std::vector<int> iota_positions(int begin, int count) {
  std::vector<int> p(static_cast<std::size_t>(count));
  std::iota(p.begin(), p.end(), begin);
  return p;
}

bool same_bits(const float* a, const float* b, int count) { return std::memcmp(a, b, sizeof(float) * count) == 0; }

// Logits [n, vocab] of a causal forward of `tokens` at positions start.. onto `seq`.
std::vector<float> causal(test::Engine& e, int seq, const std::vector<int>& tokens, int start) {
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(e.config().vocab_size));
  const auto positions = iota_positions(start, static_cast<int>(tokens.size()));
  e.forward(seq, {tokens, positions, {}, true}, logits);
  return logits;
}

const char* const kModels[] = {"target-16m", "draft-4m", "draft-1m"};

}  // namespace

TEST_CASE("forward: prefill then one-token decodes equals one prefill, bitwise", "[engine][invariance]") {
  for (const char* name : kModels) {
    INFO("model " << name);
    const Backend& m = shared_model(name);
    const int vocab = m.config().vocab_size;
    std::vector<int> prompt = reference_prompt(name, 3);
    prompt.resize(48);
    test::Engine e(m, 16, 16);
    KvCache& cache = e.cache;
    const int whole = cache.create();
    const std::vector<float> all = causal(e, whole, prompt, 0);

    for (int k : {1, 7, 16, 33}) {
      INFO("prefill " << k << " tokens, then decode");
      const int seq = cache.create();
      const std::vector<int> head(prompt.begin(), prompt.begin() + k);
      const std::vector<float> first = causal(e, seq, head, 0);
      for (int i = 0; i < k; ++i) CHECK(same_bits(&first[i * std::size_t(vocab)], &all[i * std::size_t(vocab)], vocab));
      for (int i = k; i < static_cast<int>(prompt.size()); ++i) {
        const std::vector<float> row = causal(e, seq, {prompt[i]}, i);
        CHECK(same_bits(row.data(), &all[i * std::size_t(vocab)], vocab));
      }
      // The last-row-only path gives the same bits as the all-rows path.
      cache.truncate(seq, k - 1);
      std::vector<float> last(static_cast<std::size_t>(vocab));
      const int pos = k - 1;
      e.forward(seq, {std::span(&prompt[k - 1], 1), std::span(&pos, 1), {}, false}, last);
      CHECK(same_bits(last.data(), &all[(k - 1) * std::size_t(vocab)], vocab));
      cache.free(seq);
    }
    cache.free(whole);
    CHECK(cache.stats().blocks_in_use == 0);
  }
}

TEST_CASE("forward: every tree node's logits equal a causal forward of its path, bitwise", "[engine][invariance]") {
  std::mt19937 rng(20240611);
  for (const char* name : kModels) {
    const Backend& m = shared_model(name);
    const int vocab = m.config().vocab_size;
    std::vector<int> prompt = reference_prompt(name, 7);
    prompt.resize(37);  // not a multiple of the block size: the tree starts mid-block
    const int prefix_len = static_cast<int>(prompt.size());
    test::Engine e(m, 16, 64);
    KvCache& cache = e.cache;
    const int root = cache.create();
    causal(e, root, prompt, 0);

    for (int trial = 0; trial < 4; ++trial) {
      INFO("model " << name << ", tree " << trial);
      // A random tree of 12 nodes in topological order; node 0 and possibly others are roots.
      const int n = 12;
      std::vector<int> tokens(n), parents(n), depth(n), positions(n);
      for (int i = 0; i < n; ++i) {
        tokens[i] = std::uniform_int_distribution<int>(3, vocab - 1)(rng);
        parents[i] = i == 0 ? -1 : std::uniform_int_distribution<int>(-1, i - 1)(rng);
        depth[i] = parents[i] < 0 ? 0 : depth[parents[i]] + 1;
        positions[i] = prefix_len + depth[i];
      }
      const int tree_seq = cache.fork(root);
      std::vector<float> tree_logits(static_cast<std::size_t>(n) * vocab);
      e.forward(tree_seq, {tokens, positions, parents, true}, tree_logits);

      for (int node = 0; node < n; ++node) {
        std::vector<int> path;  // root-to-node node indices
        for (int j = node; j >= 0; j = parents[j]) path.insert(path.begin(), j);
        std::vector<int> path_tokens;
        for (int j : path) path_tokens.push_back(tokens[j]);
        const int seq = cache.fork(root);
        const std::vector<float> chain = causal(e, seq, path_tokens, prefix_len);
        INFO("node " << node << ", depth " << depth[node]);
        CHECK(same_bits(&chain[(path.size() - 1) * std::size_t(vocab)], &tree_logits[node * std::size_t(vocab)], vocab));
        cache.free(seq);
      }

      // Accept the path to the deepest node, commit it, and decode one more token: the same bits
      // as decoding after a causal forward of the path.
      const int deepest = static_cast<int>(std::max_element(depth.begin(), depth.end()) - depth.begin());
      std::vector<int> accepted, accepted_tokens;
      for (int j = deepest; j >= 0; j = parents[j]) accepted.insert(accepted.begin(), j);
      for (int j : accepted) accepted_tokens.push_back(tokens[j]);
      cache.commit(tree_seq, prefix_len, accepted);
      REQUIRE(cache.length(tree_seq) == prefix_len + static_cast<int>(accepted.size()));
      const int next = 13;
      const std::vector<float> after_commit = causal(e, tree_seq, {next}, cache.length(tree_seq));
      const int chain_seq = cache.fork(root);
      accepted_tokens.push_back(next);
      const std::vector<float> chain = causal(e, chain_seq, accepted_tokens, prefix_len);
      CHECK(same_bits(after_commit.data(), &chain[(accepted_tokens.size() - 1) * std::size_t(vocab)], vocab));
      cache.free(chain_seq);
      cache.free(tree_seq);
    }
    cache.free(root);
    CHECK(cache.stats().blocks_in_use == 0);
  }
}

}  // namespace specula
