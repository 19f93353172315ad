// defines: helpers of the runtime tests: the process's ModelStore, the shared reference
// prompts, bitwise equality of two sequences' cached K/V rows, a plain causal prefill into a
// fresh sequence (the cache a plain run builds, for the cache-equality tests), and a batch of
// requests under a draft-length policy checked against plain greedy.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "runtime/decoders.h"
#include "runtime/generate.h"
#include "runtime/generate_options.h"
#include "runtime/model_store.h"
#include "runtime/scheduler.h"
#include "tests/test_support.h"

namespace specula::test {

// A draft-model drafter: a chain of gamma, a static tree (`tree`) or a dynamic budget.
inline DraftOptions model_draft(const char* model, int gamma, std::vector<int> tree, int budget, bool adaptive = false) {
  DraftOptions d;
  d.method = DraftMethod::kModel;
  d.model_dir = model_dir(model);
  d.gamma = gamma;
  d.tree = std::move(tree);
  d.tree_budget = budget;
  d.adaptive = adaptive;
  return d;
}

// A draft head of `method` (eagle3, eagle, medusa) in `dir`: a chain of gamma or a static tree (`tree`).
inline DraftOptions head_draft(DraftMethod method, const std::string& dir, int gamma, std::vector<int> tree = {}) {
  DraftOptions d;
  d.method = method;
  d.model_dir = dir;
  d.gamma = gamma;
  d.tree = std::move(tree);
  return d;
}

// target-16m continuing `prompt` for max_new_tokens, every other option at its default.
inline GenerateOptions base_options(const std::vector<int>& prompt, int max_new_tokens) {
  GenerateOptions o;
  o.model_dir = model_dir("target-16m");
  o.prompt_ids = prompt;
  o.max_new_tokens = max_new_tokens;
  return o;
}

inline ModelStore& store() {
  static ModelStore models;
  return models;
}

// The prompts of tests/data/hf-greedy.json (target-16m's entries).
inline std::vector<std::vector<int>> reference_prompts() {
  std::ifstream in(source_path("tests/data/hf-greedy.json"));
  const auto j = nlohmann::json::parse(in);
  std::vector<std::vector<int>> prompts;
  for (const auto& entry : j["models"]["target-16m"]) prompts.push_back(entry["prompt_ids"].get<std::vector<int>>());
  return prompts;
}

// Bitwise equality of every K/V row of two sequences' first `length` slots.
inline bool same_cache_rows(KvCache& a, int seq_a, KvCache& b, int seq_b, int length) {
  const KvLayout& layout = a.layout();
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (int slot = 0; slot < length; ++slot) {
      if (std::memcmp(a.key(seq_a, layer, slot), b.key(seq_b, layer, slot), layout.kv_dim() * sizeof(float)) ||
          std::memcmp(a.value(seq_a, layer, slot), b.value(seq_b, layer, slot), layout.kv_dim() * sizeof(float)))
        return false;
    }
  }
  return true;
}

// A plain causal prefill of `tokens` into a fresh sequence of `cache` (runtime's prefill).
inline int plain_prefill(const Backend& model, KvCache& cache, std::span<const int> tokens) {
  std::vector<float> unused;
  const auto workspace = model.make_workspace();
  return prefill(ForwardContext{model, cache, *workspace}, tokens, unused);
}

// Four greedy requests of 8, 16, 24 and 32 tokens side by side under `policy` (with
// `threshold`), request r drafting with draft(r): checks that each gets plain greedy's tokens
// and that every block is freed; returns the nodes they drafted in all.
inline long policy_batch_drafted(GammaPolicy policy, LengthThreshold threshold,
                                 const std::function<DraftOptions(int)>& draft) {
  const auto prompts = reference_prompts();
  const int requests = 4;
  SchedulerLimits limits;
  limits.max_sequences = requests;
  limits.kv_blocks = 64 * requests;
  Scheduler scheduler(store(), base_options(prompts[0], 24), limits);
  std::vector<std::vector<int>> expected;
  for (int r = 0; r < requests; ++r) {
    GenerateOptions o = base_options(prompts[static_cast<std::size_t>(r)], 8 + 8 * r);
    expected.push_back(generate(store(), o)["ids"].get<std::vector<int>>());
    o.draft = draft(r);
    o.gamma_policy = policy;
    o.length_threshold = threshold;
    scheduler.submit(o, static_cast<uint64_t>(r));
  }
  scheduler.run();
  long drafted = 0;
  for (int r = 0; r < requests; ++r) {
    INFO("request " << r);
    CHECK(scheduler.outcome(r).samples.front() == expected[static_cast<std::size_t>(r)]);
    drafted += scheduler.outcome(r).spec.drafted;
  }
  CHECK(scheduler.kv_stats().blocks_in_use == 0);
  return drafted;
}

}  // namespace specula::test
