// The paged KV cache is invisible in the model's output: the same forward script (prefill,
// decodes, a tree verification on a fork, commit of a path, more decodes) gives bit-identical
// logits for block sizes 1, 16 and 64 and for one block holding the whole sequence (the
// contiguous layout); generation gives identical tokens and frees every block.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "runtime/generate.h"
#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

const char* const kModels[] = {"target-16m", "draft-4m", "draft-1m"};

std::vector<int> reference_prompt(const std::string& model, std::size_t index) {
  std::ifstream in(test::source_path("tests/data/hf-greedy.json"));
  REQUIRE(in);
  return nlohmann::json::parse(in).at("models").at(model).at(index).at("prompt_ids").get<std::vector<int>>();
}

// Every logit the script produces, concatenated.
std::vector<float> run_script(const Backend& m, const std::vector<int>& prompt, int block_size) {
  const int vocab = m.config().vocab_size;
  const int prompt_len = static_cast<int>(prompt.size());
  test::Engine e(m, block_size, (prompt_len + 64) / block_size + 8);
  KvCache& cache = e.cache;
  std::vector<float> all;
  auto run = [&](int seq, const std::vector<int>& tokens, const std::vector<int>& positions,
                 const std::vector<int>& parents) {
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(vocab));
    e.forward(seq, {tokens, positions, parents, true}, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  };
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  const int seq = cache.create();
  run(seq, prompt, positions, {});
  int len = prompt_len;
  for (int t : {13, 260, 314, 523}) run(seq, {t}, {len++}, {});

  // Verification tree on a fork: root 0 with children 1, 2; 3 under 1; 4 under 3; 5 a second root.
  const int tree_seq = cache.fork(seq);
  const std::vector<int> parents = {-1, 0, 0, 1, 3, -1};
  const std::vector<int> depth = {0, 1, 1, 2, 3, 0};
  std::vector<int> tree_pos;
  for (int d : depth) tree_pos.push_back(len + d);
  run(tree_seq, {853, 806, 307, 4016, 580, 1773}, tree_pos, parents);
  const std::vector<int> path = {0, 1, 3, 4};
  cache.commit(tree_seq, len, path);
  int tree_len = len + static_cast<int>(path.size());
  for (int t : {350, 13, 261}) run(tree_seq, {t}, {tree_len++}, {});
  // The parent sequence continues independently of its fork.
  for (int t : {13, 13}) run(seq, {t}, {len++}, {});
  cache.free(tree_seq);
  cache.free(seq);
  CHECK(cache.stats().blocks_in_use == 0);
  return all;
}

}  // namespace

TEST_CASE("kv: logits are bit-identical for block sizes 1, 16, 64 and one contiguous block", "[kv][forward]") {
  for (const char* name : kModels) {
    INFO("model " << name);
    const Backend& m = test::shared_backend(test::model_dir(name));
    std::vector<int> prompt = reference_prompt(name, 5);
    prompt.resize(70);
    const std::vector<float> contiguous = run_script(m, prompt, 1024);  // one block holds everything
    for (int bs : {1, 16, 64}) {
      INFO("block size " << bs);
      const std::vector<float> paged = run_script(m, prompt, bs);
      REQUIRE(paged.size() == contiguous.size());
      CHECK(std::memcmp(paged.data(), contiguous.data(), paged.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("kv: generation with block sizes 1, 16 and 64 gives identical tokens and frees every block",
          "[kv][forward]") {
  ModelStore store;
  for (const char* name : kModels) {
    INFO("model " << name);
    GenerateOptions options;
    options.model_dir = test::model_dir(name);
    options.prompt_ids = reference_prompt(name, 9);
    options.max_new_tokens = 40;
    options.num_samples = 2;  // two forks of the prompt's sequence
    std::vector<nlohmann::json> results;
    for (int bs : {1, 16, 64}) {
      options.kv_block_size = bs;
      results.push_back(generate(store, options));
      const auto& kv = results.back().at("stats").at("kv");
      INFO("block size " << bs);
      CHECK(kv.at("block_size") == bs);
      CHECK(kv.at("blocks_in_use_at_end") == 0);
      CHECK(kv.at("blocks_peak").get<int>() >= 1);
      CHECK(results.back().at("ids").size() == 40);
    }
    CHECK(results[1].at("ids") == results[0].at("ids"));
    CHECK(results[2].at("ids") == results[0].at("ids"));
    CHECK(results[1].at("samples") == results[0].at("samples"));
    CHECK(results[2].at("samples") == results[0].at("samples"));
  }
}

TEST_CASE("kv: a forward that runs out of blocks fails cleanly and the cache stays usable", "[kv][forward]") {
  const Backend& m = test::shared_backend(test::model_dir("draft-1m"));
  const std::vector<int> prompt = reference_prompt("draft-1m", 0);  // 216 tokens
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size)), again(logits.size());
  test::Engine e(m, 16, 16);  // 256 slots
  KvCache& cache = e.cache;
  const int other = cache.create();
  e.forward(other, {std::span(prompt).first(100), std::span(positions).first(100), {}, false}, logits);
  const int seq = cache.create();
  CHECK_THROWS_AS(e.forward(seq, {prompt, positions, {}, false}, logits), ResourceExhausted);
  CHECK(cache.length(seq) == 0);
  CHECK(cache.length(other) == 100);
  // The other sequence is intact: its next step gives the same bits as on a fresh cache.
  const int next = prompt[100], pos = 100;
  e.forward(other, {std::span(&next, 1), std::span(&pos, 1), {}, false}, logits);
  test::Engine fresh(m, 16, 16);
  const int ref = fresh.cache.create();
  fresh.forward(ref, {std::span(prompt).first(101), std::span(positions).first(101), {}, false}, again);
  CHECK(std::memcmp(logits.data(), again.data(), logits.size() * sizeof(float)) == 0);
  cache.free(other);
  e.forward(seq, {prompt, positions, {}, false}, logits);  // now it fits
  CHECK(cache.length(seq) == static_cast<int>(prompt.size()));
}

}  // namespace specula
