// Logit controls (sampling/logit_controls.h): each against its own definition (Hugging Face's
// repetition penalty and no-repeat rule, OpenAI's frequency and presence penalties, bias, bans,
// min new tokens) on random rows and histories; a drafted path counts as committed tokens;
// refusals name the key and the value; greedy speculative decoding emits plain decoding's
// tokens with every control on, for every drafter, alone and in a batch of 16; speculative
// sampling's second token follows the law of its own path's counts, and the test rejects the
// law of the committed prefix's counts (the bug it guards against).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "draft/model_drafter.h"
#include "runtime/batch_run.h"
#include "runtime/decoders.h"
#include "runtime/generate.h"
#include "runtime/speculative_sequence.h"
#include "sampling/logit_controls.h"
#include "sampling/sampler.h"
#include "tests/test_engine_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"
#include "tests/test_verify_support.h"

namespace specula {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The controls one by one, each from its published formula, in the documented order.
std::vector<float> reference(const LogitControls& c, std::vector<float> x, const std::vector<int>& prompt,
                             const std::vector<int>& generated, const std::vector<int>& eos) {
  std::vector<int> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const int vocab = static_cast<int>(x.size());
  // Hugging Face: score = gather(scores, input_ids); where(score < 0, score * r, score / r).
  for (int t = 0; t < vocab; ++t)
    if (std::find(all.begin(), all.end(), t) != all.end())
      x[t] = x[t] < 0 ? x[t] * c.repetition_penalty : x[t] / c.repetition_penalty;
  // OpenAI: mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence.
  for (int t = 0; t < vocab; ++t) {
    const long n = std::count(generated.begin(), generated.end(), t);
    if (n > 0) x[t] -= c.frequency_penalty * static_cast<float>(n) + c.presence_penalty;
  }
  // Hugging Face's _get_ngrams: every n-gram's prefix -> its next tokens; ban those after the
  // sequence's last n - 1 tokens.
  const int n = c.no_repeat_ngram_size;
  if (n > 0 && static_cast<int>(all.size()) + 1 >= n) {
    std::map<std::vector<int>, std::vector<int>> ngrams;
    for (std::size_t i = 0; i + n <= all.size(); ++i)
      ngrams[std::vector<int>(all.begin() + i, all.begin() + i + n - 1)].push_back(all[i + n - 1]);
    const std::vector<int> last(all.end() - (n - 1), all.end());
    for (int t : ngrams[last]) x[t] = -kInf;
  }
  for (const auto& [t, b] : c.logit_bias) x[t] += b;
  for (int t : c.banned_tokens) x[t] = -kInf;
  if (static_cast<int>(generated.size()) < c.min_new_tokens)
    for (int t : eos) x[t] = -kInf;
  return x;
}

std::vector<int> random_tokens(Philox& rng, int vocab, int max_len) {
  std::vector<int> out(static_cast<std::size_t>(rng.uniform() * (max_len + 1)));
  for (int& t : out) t = static_cast<int>(rng.uniform() * vocab);
  return out;
}

LogitControls random_controls(Philox& rng, int vocab) {
  LogitControls c;
  auto on = [&] { return rng.uniform() < 0.5; };
  if (on()) c.repetition_penalty = 0.5f + static_cast<float>(rng.uniform()) * 1.5f;
  if (on()) c.frequency_penalty = static_cast<float>(rng.uniform() * 4 - 2);
  if (on()) c.presence_penalty = static_cast<float>(rng.uniform() * 4 - 2);
  if (on()) c.no_repeat_ngram_size = 1 + static_cast<int>(rng.uniform() * 4);
  if (on())
    for (int t = 0; t < vocab; ++t)
      if (rng.uniform() < 0.2) c.logit_bias.emplace_back(t, static_cast<float>(rng.uniform() * 6 - 3));
  if (on()) c.banned_tokens = random_tokens(rng, vocab, 3);
  if (on()) c.min_new_tokens = static_cast<int>(rng.uniform() * 6);
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof x) == 0;
         });
}

GenerateOptions options_for(const std::vector<int>& prompt, const LogitControls& controls) {
  GenerateOptions o;
  o.model_dir = test::model_dir("target-16m");
  o.prompt_ids = prompt;
  o.max_new_tokens = test::kSanitized ? 12 : 32;
  o.threads = 1;
  o.controls = controls;
  return o;
}

DraftOptions drafter(DraftMethod method, std::vector<int> tree = {}, int budget = 0) {
  DraftOptions d;
  d.method = method;
  if (method == DraftMethod::kModel) d.model_dir = test::model_dir("draft-1m");
  d.gamma = 3;
  d.tree = std::move(tree);
  d.tree_budget = budget;
  return d;
}

}  // namespace

TEST_CASE("logit controls: each equals its definition on random rows and histories, in the documented order",
          "[sampling]") {
  Philox rng(37);
  int edited = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int vocab = 2 + static_cast<int>(rng.uniform() * 40);
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    for (float& x : logits) x = static_cast<float>(std::round(rng.uniform() * 8) - 4) * 0.5f;  // ties, zeros, signs
    const std::vector<int> prompt = random_tokens(rng, vocab, 12), generated = random_tokens(rng, vocab, 10),
                           path = random_tokens(rng, vocab, 4), eos = random_tokens(rng, vocab, 2);
    const LogitControls c = random_controls(rng, vocab);
    std::vector<int> history = generated;
    history.insert(history.end(), path.begin(), path.end());
    const std::vector<float> want = reference(c, logits, prompt, history, eos);
    std::vector<float> got = logits;
    apply_controls(c, {prompt, generated, path, eos}, got);
    INFO("trial " << trial << ", vocab " << vocab << ", first control " << first_active_control(c));
    REQUIRE(same_bits(got, want));
    edited += !same_bits(got, logits);
  }
  CHECK(edited > 1000);
}

TEST_CASE("logit controls: a drafted path's tokens count exactly as committed ones", "[sampling]") {
  Philox rng(41);
  for (int trial = 0; trial < 500; ++trial) {
    const int vocab = 2 + static_cast<int>(rng.uniform() * 30);
    const LogitControls c = random_controls(rng, vocab);
    const std::vector<int> eos = {0};
    std::vector<int> tokens = random_tokens(rng, vocab, 16);
    const std::size_t prompt_len = static_cast<std::size_t>(rng.uniform() * (tokens.size() + 1));
    const std::vector<int> path = random_tokens(rng, vocab, 5);
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    for (float& x : logits) x = static_cast<float>(rng.uniform() * 6 - 3);
    const RowControls row{&c, prompt_len, eos};
    std::vector<float> with_path = logits, committed = logits;
    row.apply(tokens, path, with_path);
    tokens.insert(tokens.end(), path.begin(), path.end());
    row.apply(tokens, {}, committed);
    INFO("trial " << trial);
    REQUIRE(same_bits(with_path, committed));
  }
}

TEST_CASE("logit controls: invalid values are refused naming the key and the value", "[sampling]") {
  const auto refused = [](auto set, const std::string& piece) {
    LogitControls c;
    set(c);
    CHECK_THROWS_WITH(validate_logit_controls(c, 100, {}), Catch::Contains(piece));
  };
  refused([](LogitControls& c) { c.repetition_penalty = 0; }, "sampling.repetition_penalty must be > 0 and finite, got 0");
  refused([](LogitControls& c) { c.repetition_penalty = -kInf; }, "sampling.repetition_penalty must be > 0");
  refused([](LogitControls& c) { c.frequency_penalty = 2.5f; }, "sampling.frequency_penalty must be in [-2, 2], got 2.5");
  refused([](LogitControls& c) { c.presence_penalty = -3; }, "sampling.presence_penalty must be in [-2, 2], got -3");
  refused([](LogitControls& c) { c.no_repeat_ngram_size = -1; }, "sampling.no_repeat_ngram_size must be >= 0, got -1");
  refused([](LogitControls& c) { c.min_new_tokens = -2; }, "sampling.min_new_tokens must be >= 0, got -2");
  refused([](LogitControls& c) { c.logit_bias = {{100, 1.0f}}; }, "sampling.logit_bias: token 100 is outside the vocabulary [0, 100)");
  refused([](LogitControls& c) { c.logit_bias = {{3, kInf}}; }, "sampling.logit_bias: token 3 has bias inf");
  refused([](LogitControls& c) { c.logit_bias = {{3, 1.0f}, {3, 2.0f}}; }, "sampling.logit_bias: token 3 is biased twice");
  refused([](LogitControls& c) { c.banned_tokens = {-1}; }, "sampling.banned_tokens: token -1 is outside the vocabulary");

  GenerateOptions beam = options_for({1, 2, 3}, {});
  beam.sampling = SamplingOptions::beam(2);
  beam.controls.presence_penalty = 0.5f;
  CHECK_NOTHROW(validate_options(beam, cli_option_names()));
  beam.controls.presence_penalty = 2.5f;
  CHECK_THROWS_WITH(validate_options(beam, cli_option_names()),
                    Catch::Contains("--presence-penalty must be in [-2, 2], got 2.5"));
  GenerateOptions big = options_for({1, 2, 3}, {});
  big.controls.banned_tokens = {4096};
  CHECK_THROWS_WITH(generate(test::store(), big), Catch::Contains("--banned-tokens: token 4096 is outside the vocabulary [0, 4096)"));
  big.controls.banned_tokens.resize(4096);
  std::iota(big.controls.banned_tokens.begin(), big.controls.banned_tokens.end(), 0);
  CHECK_THROWS_WITH(generate(test::store(), big),
                    Catch::Contains("--banned-tokens bans every token of the vocabulary (4096): nothing is left to generate"));
  big.controls.banned_tokens.pop_back();
  CHECK(generate(test::store(), big)["ids"].get<std::vector<int>>() ==
        std::vector<int>(static_cast<std::size_t>(big.max_new_tokens), 4095));  // the one token left
}

TEST_CASE("logit controls: greedy speculative decoding emits plain decoding's tokens with every control on",
          "[runtime][speculative]") {
  const std::vector<std::vector<int>> prompts = test::reference_prompts();
  REQUIRE(prompts.size() >= 2);
  // Every control on; the ban and the bias hit tokens plain decoding emits without them.
  const nlohmann::json free = generate(test::store(), options_for(prompts[0], {}));
  const std::vector<int> free_ids = free["ids"].get<std::vector<int>>();
  LogitControls c;
  c.repetition_penalty = 1.3f;
  c.frequency_penalty = 0.4f;
  c.presence_penalty = 0.2f;
  c.no_repeat_ngram_size = 3;
  c.logit_bias = {{free_ids[1], -2.0f}, {free_ids[2], 1.0f}};
  c.banned_tokens = {free_ids[0]};
  c.min_new_tokens = 1000;
  const GenerateOptions plain = options_for(prompts[0], c);
  const nlohmann::json expected = generate(test::store(), plain);
  CHECK(expected["ids"] != free["ids"]);
  for (const DraftOptions& d : {drafter(DraftMethod::kModel), drafter(DraftMethod::kModel, {2, 2}),
                                drafter(DraftMethod::kModel, {}, 6), drafter(DraftMethod::kNgram)}) {
    GenerateOptions spec = plain;
    spec.draft = d;
    const nlohmann::json result = generate(test::store(), spec);
    INFO(name_of(d.method) << " tree " << d.tree.size() << " budget " << d.tree_budget);
    CHECK(result["ids"] == expected["ids"]);
    CHECK(result["stats"]["accepted"].get<long>() > 0);
  }

  // A batch of 16: each request's tokens equal its plain run's.
  const int requests = test::kSanitized ? 4 : 16;
  std::vector<GenerateOptions> plain_batch, spec_batch;
  for (int i = 0; i < requests; ++i) {
    plain_batch.push_back(options_for(prompts[static_cast<std::size_t>(i) % prompts.size()], c));
    plain_batch.back().max_new_tokens = 12 + i % 5;
    spec_batch.push_back(plain_batch.back());
    spec_batch.back().draft = drafter(i % 2 ? DraftMethod::kNgram : DraftMethod::kModel);
  }
  const BatchRun a = run_requests(test::store(), plain_batch, requests), b = run_requests(test::store(), spec_batch, requests);
  REQUIRE(a.results.size() == b.results.size());
  for (std::size_t i = 0; i < a.results.size(); ++i) {
    INFO("request " << i);
    CHECK(a.results[i]["ids"] == b.results[i]["ids"]);
  }
}

TEST_CASE("logit controls under speculative sampling: a drafted node's row counts its own path",
          "[runtime][speculative][statistical]") {
  const Backend& target = test::store().get(test::model_dir("target-16m"));
  const Backend& draft = test::store().get(test::model_dir("draft-1m"));
  const int vocab = target.config().vocab_size;
  const std::span<const int> eos = target.config().eos_token_ids;
  const auto sampler = make_sampler(SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f));
  LogitControls c;
  c.presence_penalty = 1.5f;
  c.frequency_penalty = 0.5f;
  // The sampler's law after `tokens`, the controls reading `generated` of them.
  const auto law = [&](std::span<const int> tokens, std::size_t prompt_len) {
    KvCache cache(target.model().kv_layout(16), 16);
    std::vector<float> logits, p(static_cast<std::size_t>(vocab));
    const auto workspace = target.make_workspace();
    cache.free(prefill(ForwardContext{target, cache, *workspace}, tokens, logits));
    RowControls{&c, prompt_len, eos}.apply(tokens, {}, logits);
    sampler->distribution(logits, p);
    return std::vector<double>(p.begin(), p.end());
  };
  // The prompt and first token x where the two laws of the second token differ most, weighted
  // by p(x): the law of x's own path (x counted) and the committed prefix's (x not counted).
  std::vector<int> prompt;
  int first = -1;
  double best = -1;
  std::vector<double> right, wrong;
  for (const auto& reference : test::reference_prompts()) {
    for (std::size_t length = 16; length <= 28 && length < reference.size(); length += 6) {
      std::vector<int> candidate(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(length));
      const std::vector<double> p = law(candidate, candidate.size());
      const int x = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
      candidate.push_back(x);
      std::vector<double> counted = law(candidate, candidate.size() - 1), uncounted = law(candidate, candidate.size());
      candidate.pop_back();
      double tv = 0;
      for (int v = 0; v < vocab; ++v) tv += std::abs(counted[v] - uncounted[v]) / 2;
      if (p[x] * tv > best) best = p[x] * tv, first = x, prompt = candidate, right = counted, wrong = uncounted;
    }
  }
  double tv = 0;
  for (int v = 0; v < vocab; ++v) tv += std::abs(right[v] - wrong[v]) / 2;
  INFO("first token " << first << ", TV between the path's law and the prefix's " << tv);
  REQUIRE(tv > 0.05);

  const DistributionFn distribution = [&](std::span<const float> l, std::span<float> p) { sampler->distribution(l, p); };
  KvCache cache(target.model().kv_layout(16), 4096), draft_cache(draft.model().kv_layout(16), 4096);
  const auto workspace = target.make_workspace(), draft_workspace = draft.make_workspace();
  const auto body = std::span(prompt).first(prompt.size() - 1);
  const int prompt_seq = test::plain_prefill(target, cache, body);
  const int draft_prompt_seq = test::plain_prefill(draft, draft_cache, body);
  const RowControls controls{&c, prompt.size(), eos};
  const int samples = test::kSanitized ? 300 : 3000;
  for (const std::vector<int>& branching : {std::vector<int>{1, 1, 1}, std::vector<int>{2, 2}}) {
    TreeShape shape;
    shape.branching = branching;
    INFO("tree of " << branching.size() << " levels, " << branching[0] << " at the root");
    std::vector<long> counts(static_cast<std::size_t>(vocab), 0);
    long same_step = 0;  // second tokens drawn in x's own step, at the node after x
    SpeculativeStats stats;
    for (int i = 0; i < samples; ++i) {
      auto d = std::make_unique<ModelDrafter>(ForwardContext{draft, draft_cache, *draft_workspace},
                                              draft_cache.fork(draft_prompt_seq), distribution, true, shape, controls);
      SpeculativeSequence sequence(ForwardContext{target, cache, *workspace}, cache.fork(prompt_seq), std::move(d),
                                   *sampler, prompt, Philox(2026, static_cast<uint64_t>(i)), VerifyRule::kToken, controls);
      const DraftBound bound{static_cast<int>(branching.size()), 0};
      const bool both = sequence.step(bound, stats).tokens.size() >= 2;
      while (sequence.committed().size() < prompt.size() + 2) sequence.step(bound, stats);
      if (sequence.committed()[prompt.size()] != first) continue;
      ++counts[static_cast<std::size_t>(sequence.committed()[prompt.size() + 1])];
      same_step += both;
    }
    const long n = std::accumulate(counts.begin(), counts.end(), 0L);
    const double share = static_cast<double>(same_step) / static_cast<double>(std::max(n, 1L));
    INFO(n << " samples with first token x; " << same_step << " drew the second token in x's step");
    REQUIRE(n >= samples / 10);
    const test::ChiSquare chi = test::chi_square(counts, right);
    INFO("against the path's law: chi2 " << chi.statistic << " df " << chi.df << " p-value " << chi.p_value);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > 1e-3);
    // The bug: rows of drafted nodes read the committed prefix's counts. Second tokens drawn
    // in x's step would follow the prefix's law, the others the path's.
    std::vector<double> buggy(right.size());
    for (std::size_t v = 0; v < buggy.size(); ++v) buggy[v] = share * wrong[v] + (1 - share) * right[v];
    const test::ChiSquare planted = test::chi_square(counts, buggy);
    INFO("against the bug's law: chi2 " << planted.statistic << " p-value " << planted.p_value);
    if (!test::kSanitized) CHECK(planted.p_value < 1e-3);
    WARN("controls under speculation, tree " << branching.size() << " levels x" << branching[0] << ": " << n
                                             << " samples with first token x, " << share
                                             << " of them drew the second in x's step; TV(path, prefix) " << tv
                                             << "; p-value against the path's law " << chi.p_value
                                             << ", against the bug's " << planted.p_value);
  }
  cache.free(prompt_seq);
  draft_cache.free(draft_prompt_seq);
}

}  // namespace specula
