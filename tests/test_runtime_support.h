// defines: helpers of the runtime tests: the process's ModelStore, the shared reference
// prompts, bitwise equality of two sequences' cached K/V rows, a plain causal prefill into a
// fresh sequence (the cache a plain run builds, for the cache-equality tests), a batch of
// requests under a draft-length policy checked against plain greedy, greedy requests verified
// on the device checked against plain greedy, and the chi-square check of a drafter's law.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
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
#include "sampling/sampler.h"
#include "tests/test_support.h"
#include "tests/test_verify_support.h"

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

// `size` greedy requests (request(r)) drafted by `draft` through one scheduler whose target
// verifies on its device: each emits plain[r], and every speculative step was verified on the
// device, its time taken from the device's events; a draft model's plain chains (without
// logit controls that read n-grams) were drawn on its device and verified there without coming
// back in between, and so were its dynamic trees (the steps whose bound leaves room for their
// batches; without controls), an EAGLE head's chains and trees (dynamic ones: as a draft
// model's) and Medusa heads' chains and static trees (the steps that draft at all; without
// controls). Returns the steps drafted on the device (a static tree's: those whose bound
// leaves it whole).
inline long check_device_verified_greedy(const std::function<GenerateOptions(int)>& request, const DraftOptions& draft,
                                         int size, std::span<const std::vector<int>> plain) {
  SchedulerLimits limits;
  limits.max_sequences = size;
  limits.kv_blocks = 64 * size;
  Scheduler scheduler(store(), request(0), limits);
  for (int r = 0; r < size; ++r) {
    GenerateOptions o = request(r);
    o.draft = draft;
    scheduler.submit(o, static_cast<uint64_t>(r));
  }
  scheduler.run();
  long steps = 0;
  for (int r = 0; r < size; ++r) {
    CHECK(scheduler.outcome(r).samples.front() == plain[static_cast<std::size_t>(r)]);
    steps += scheduler.outcome(r).spec.steps;
    CHECK(scheduler.outcome(r).spec.sample_verify_s > 0);
  }
  CHECK(steps > 0);
  CHECK(scheduler.stats().device_verified == steps);
  // A draft model's plain chains are drawn on its device (a CUDA draft backend), every step's,
  // where no logit control reads the path's n-grams (the device edits their rows). Under
  // active controls, dynamic trees and Medusa's heads draw on the host.
  const LogitControls& controls = request(0).controls;
  const bool free = !controls.active(), edited_there = free || controls.no_repeat_ngram_size == 0;
  const bool model = draft.method == DraftMethod::kModel;
  const bool device_chain = model && draft.drafts_chain() && draft.siblings == 0 && edited_there;
  const bool heads = (draft.method == DraftMethod::kMedusa && !draft.dynamic_tree() && free) ||
                     (drafts_with_eagle_head(draft.method) && (free || (edited_there && !draft.dynamic_tree())));
  if ((model && draft.dynamic_tree() && free) || heads) {
    // Those whose batches lie within the step's bound, or that draft at all (a heads' step
    // whose bound leaves only the bonus token drafts nothing).
    CHECK(scheduler.stats().device_drafted > 0);
    CHECK(scheduler.stats().device_drafted <= steps);
  } else if (model && !draft.drafts_chain() && edited_there) {
    CHECK(scheduler.stats().device_drafted <= steps);
  } else {
    CHECK(scheduler.stats().device_drafted == (device_chain ? steps : 0));
  }
  // And those chains (trees) go to the target's verification without coming back first.
  CHECK(scheduler.stats().device_chained == scheduler.stats().device_drafted);
  return scheduler.stats().device_drafted;
}

// The law of a drafter's speculative sampling under `sampling` past the first token: samples
// of two new tokens are conditioned on a first token t and their second tokens held against
// p(. | prompt, t) (the pair's law is the target's, so this conditional is too); a second token
// comes from the first step's accepted path or bonus, or from a second step after the drafter
// caught up on the verified path. The prompt (of target-16m's reference prompts) and t (its
// most likely first token) are those with the most effective cells, p(t) exp(H(p(. |
// prompt, t))). Pearson chi-square at alpha = 1e-3; at least samples p(t) / 2 samples must be
// conditioned. Its power at 2000 samples: docs/measurements.md, "Power of the heads' chi-square
// tests"; under the sanitizers (200 samples) a smoke test. The prompt and t are printed on failure.
inline void check_second_token_law(const DraftOptions& draft, const SamplingOptions& sampling, int samples,
                                   uint64_t seed) {
  const Backend& target = store().get(model_dir("target-16m"));
  const int vocab = target.config().vocab_size;
  const auto sampler = make_sampler(sampling);
  const auto law = [&](std::span<const int> tokens) {
    std::vector<float> logits(static_cast<std::size_t>(vocab)), p(logits.size());
    KvCache cache(target.kv_layout(16), 64);
    const auto workspace = target.make_workspace();
    std::vector<int> positions(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int>(i);
    ForwardContext{target, cache, *workspace}.run(SequenceRows{cache.create(), tokens, positions, {}, RowLogits::kLast},
                                                  logits);
    sampler->distribution(logits, p);
    return std::vector<double>(p.begin(), p.end());
  };
  std::vector<int> prompt;
  std::vector<double> second;
  double p_first = 0, best = -1;
  int t = -1;
  for (std::vector<int> candidate : reference_prompts()) {
    const std::vector<double> first = law(candidate);
    const int top = static_cast<int>(std::max_element(first.begin(), first.end()) - first.begin());
    candidate.push_back(top);
    std::vector<double> next = law(candidate);
    candidate.pop_back();
    double entropy = 0;
    for (double x : next) entropy -= x > 0 ? x * std::log(x) : 0.0;
    const double cells = first[static_cast<std::size_t>(top)] * std::exp(entropy);
    if (cells > best)
      best = cells, prompt = candidate, second = std::move(next), t = top, p_first = first[static_cast<std::size_t>(top)];
  }

  GenerateOptions o = base_options(prompt, 2);
  o.sampling = sampling;
  o.draft = draft;
  o.seed = seed;
  o.num_samples = samples;
  const auto result = generate(store(), o);
  std::vector<long> counts(static_cast<std::size_t>(vocab), 0);
  long conditioned = 0;
  for (const auto& sample : result["samples"])
    if (sample[0].get<int>() == t) ++counts[sample[1].get<int>()], ++conditioned;
  CHECK(result["stats"]["drafted"].get<long>() > 0);
  const ChiSquare chi = chi_square(counts, second);
  INFO("prompt of " << prompt.size() << " tokens, first token " << t << " (p " << p_first << ") in " << conditioned
                    << " of " << samples << " samples; chi2 " << chi.statistic << " df " << chi.df << " p-value "
                    << chi.p_value);
  CHECK(conditioned >= static_cast<long>(samples * p_first / 2));
  CHECK(chi.impossible == 0);
  CHECK(chi.p_value > 1e-3);
}

}  // namespace specula::test
