// Logit controls (sampling/logit_controls.h): each against its own definition (Hugging Face's
// repetition penalty and no-repeat rule, OpenAI's frequency and presence penalties, bias, bans,
// min new tokens) on random rows and histories; a drafted path counts as committed tokens;
// refusals name the key and the value; greedy speculative decoding emits plain decoding's
// tokens with every control on, for every drafter, alone and in a batch of 16; speculative
// sampling with the penalties, a bias and a minimum on, for a draft-model chain, static and
// dynamic trees and n-grams: the first token follows its law, and the second after a first
// token x, drawn at the drafted node after x, follows the law of x's own path's counts
// (chi-square, with its power against small biases stated), while the law of the committed
// prefix's counts (the bug it guards against) is rejected.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
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
  o.max_new_tokens = 32;  // n-grams need this many tokens to find a match in every prompt
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

namespace {

// Runs of one drafter's speculative sampling after a prompt: the first token of every run and,
// of the runs whose first token is x, the second token and whether it was drawn in x's own
// step (at the tree node after x, whose row reads x's path).
struct SecondTokens {
  std::vector<long> first, second;  // counts by token
  long same_step = 0;
};

// `samples` runs, run i with Philox(seed, i), each its own fork of `prompt_seq` (which holds
// all of `prompt` but its last token) and a fresh drafter.
SecondTokens second_tokens(const ForwardContext& target, KvCache::SeqId prompt_seq, const std::vector<int>& prompt,
                           int x, const Sampler& sampler, const RowControls& controls,
                           const std::function<std::unique_ptr<Drafter>()>& make_drafter, DraftBound bound,
                           int samples, uint64_t seed) {
  const auto vocab = static_cast<std::size_t>(target.backend.config().vocab_size);
  SecondTokens out{std::vector<long>(vocab, 0), std::vector<long>(vocab, 0)};
  SpeculativeStats stats;
  for (int i = 0; i < samples; ++i) {
    SpeculativeSequence sequence(target, target.cache.fork(prompt_seq), make_drafter(), sampler, prompt,
                                 Philox(seed, static_cast<uint64_t>(i)), VerifyRule::kToken, controls);
    const bool both = sequence.step(bound, stats).tokens.size() >= 2;
    const int first = sequence.committed()[prompt.size()];
    ++out.first[static_cast<std::size_t>(first)];
    if (first != x) continue;
    while (sequence.committed().size() < prompt.size() + 2) sequence.step(bound, stats);
    ++out.second[static_cast<std::size_t>(sequence.committed()[prompt.size() + 1])];
    out.same_step += both;
  }
  return out;
}

}  // namespace

TEST_CASE("logit controls under speculative sampling: a drafted node's row counts its own path",
          "[runtime][speculative][statistical]") {
  const Backend& target = test::store().get(test::model_dir("target-16m"));
  const Backend& draft = test::store().get(test::model_dir("draft-1m"));
  const int vocab = target.config().vocab_size;
  const std::span<const int> eos = target.config().eos_token_ids;
  const auto sampler = make_sampler(SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f));
  const NgramConfig ngram{1, 3, 3};
  constexpr double kAlpha = 1e-3;
  // The penalties, the minimum (EOS masked for the first token only) and a bias: x raised (more
  // runs begin with it), EOS raised to a logit below the most probable other token after x, so
  // that the minimum shapes the second token's law.
  LogitControls c;
  c.repetition_penalty = 1.3f;
  c.presence_penalty = 1.5f;
  c.frequency_penalty = 0.5f;
  c.min_new_tokens = 1;
  // The logits after `tokens`.
  const auto logits_after = [&](const Backend& model, std::span<const int> tokens) {
    KvCache cache(model.model().kv_layout(16), 16);
    std::vector<float> logits;
    const auto workspace = model.make_workspace();
    cache.free(prefill(ForwardContext{model, cache, *workspace}, tokens, logits));
    return logits;
  };
  // The sampler's law after `tokens` from their `logits`, the controls reading the tokens after
  // the first prompt_len as generated.
  const auto law = [&](std::vector<float> logits, std::span<const int> tokens, std::size_t prompt_len) {
    RowControls{&c, prompt_len, eos}.apply(tokens, {}, logits);
    std::vector<float> p(static_cast<std::size_t>(vocab));
    sampler->distribution(logits, p);
    return std::vector<double>(p.begin(), p.end());
  };
  // The logits after every prefix of `tokens` ([tokens.size(), vocab]), in one forward.
  const auto logits_after_each = [&](const Backend& model, std::span<const int> tokens) {
    test::Engine e(model, 16, 64);
    std::vector<int> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(vocab));
    const int seq = e.cache.create();
    e.forward(seq, {tokens, positions, {}, true}, logits);
    e.cache.free(seq);
    return logits;
  };
  const auto row = [&](const std::vector<float>& logits, std::size_t i) {
    return std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                              logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
  };
  // The prompt, a reference prompt's first 16-48 tokens, after which the n-gram drafter
  // proposes x and more and x is among the draft's four most probable tokens (so that every
  // drafter drafts x), where the penalties make the second token's two laws differ most,
  // weighted by how often a chain's drafted x is accepted (min(p(x), q(x))): the law of x's
  // own path (x counted) and the committed prefix's (x not counted).
  std::vector<int> prompt;
  int first = -1;
  double best = -1;
  std::vector<float> x_logits;  // the target's after prompt + x
  for (const auto& reference : test::reference_prompts()) {
    const std::span<const int> tokens = std::span(reference).first(std::min<std::size_t>(48, reference.size() - 1));
    const std::vector<float> p_rows = logits_after_each(target, tokens), q_rows = logits_after_each(draft, tokens);
    NgramProposer proposer(ngram);
    proposer.append(tokens.first(15));
    for (std::size_t length = 16; length <= tokens.size(); ++length) {
      const auto candidate = tokens.first(length);
      proposer.append(candidate.last(1));
      const TokenTree proposal = proposer.propose();
      if (proposal.size() < 2) continue;
      const int x = proposal.tokens[0];
      c.logit_bias = {{x, 1.0f}};
      const std::vector<double> q = law(row(q_rows, length - 1), candidate, length);
      const double q_x = q[static_cast<std::size_t>(x)];
      if (q_x <= best || std::count_if(q.begin(), q.end(), [&](double v) { return v > q_x; }) >= 4) continue;
      const double p_x = law(row(p_rows, length - 1), candidate, length)[static_cast<std::size_t>(x)];
      if (p_x <= best) continue;  // the score is at most min(p(x), q(x))
      std::vector<int> with_x(candidate.begin(), candidate.end());
      with_x.push_back(x);
      std::vector<float> after = logits_after(target, with_x);
      const double score =
          std::min(p_x, q_x) * test::total_variation(law(after, with_x, length), law(after, with_x, length + 1));
      if (score > best) best = score, first = x, prompt = std::move(with_x), x_logits = std::move(after);
    }
  }
  REQUIRE(first >= 0);
  prompt.pop_back();
  std::vector<int> with_x = prompt;
  with_x.push_back(first);
  c.logit_bias = {{first, 1.0f}};
  std::vector<float> edited = x_logits;
  RowControls{&c, prompt.size(), eos}.apply(with_x, {}, edited);
  edited[static_cast<std::size_t>(eos[0])] = -kInf;
  const float top = *std::max_element(edited.begin(), edited.end());
  c.logit_bias.emplace_back(eos[0], top - x_logits[static_cast<std::size_t>(eos[0])] - 1.0f);
  // The first token's law, and the second's after x: x's path's and the committed prefix's.
  const std::vector<double> root = law(logits_after(target, prompt), prompt, prompt.size());
  const std::vector<double> right = law(x_logits, with_x, prompt.size()), wrong = law(x_logits, with_x, with_x.size());
  const double tv = test::total_variation(right, wrong);
  const double eos_mass = right[static_cast<std::size_t>(eos[0])];
  INFO("first token " << first << ", p(x) " << root[static_cast<std::size_t>(first)]
                      << ", TV between the path's law and the prefix's " << tv << ", EOS in the path's law " << eos_mass);
  REQUIRE(tv > 0.05);
  CHECK(eos_mass > 0.01);  // the minimum is met on x's path, not on the prefix
  CHECK(wrong[static_cast<std::size_t>(eos[0])] == 0.0);

  const DistributionFn distribution = [&](std::span<const float> l, std::span<float> p) { sampler->distribution(l, p); };
  KvCache cache(target.model().kv_layout(16), 4096), draft_cache(draft.model().kv_layout(16), 4096);
  const auto workspace = target.make_workspace(), draft_workspace = draft.make_workspace();
  const ForwardContext target_context{target, cache, *workspace};
  const auto body = std::span(prompt).first(prompt.size() - 1);
  const int prompt_seq = test::plain_prefill(target, cache, body);
  const int draft_prompt_seq = test::plain_prefill(draft, draft_cache, body);
  const RowControls controls{&c, prompt.size(), eos};
  const auto model = [&](TreeShape shape) {
    return [&, shape]() -> std::unique_ptr<Drafter> {
      return std::make_unique<ModelDrafter>(ForwardContext{draft, draft_cache, *draft_workspace},
                                            draft_cache.fork(draft_prompt_seq), distribution, true, shape, controls);
    };
  };
  const auto shape = [](std::vector<int> branching, int budget) {
    TreeShape s;
    s.topology = branching_topology(branching);
    s.dynamic_budget = budget;
    return s;
  };
  struct Drafting {
    const char* name;
    std::function<std::unique_ptr<Drafter>()> make;
    DraftBound bound;
  };
  const std::vector<Drafting> draftings = {
      {"draft-model chain of 3", model(shape({1, 1, 1}, 0)), {3, 0}},
      {"static tree 2x2", model(shape({2, 2}, 0)), {2, 0}},
      {"dynamic tree of 6 nodes", model(shape({}, 6)), {3, 0}},
      {"n-gram chain of 3", [&] { return std::make_unique<NgramDrafter>(ngram); }, {3, 0}},
  };
  const int samples = test::kSanitized ? 100 : 1500;
  const int trials = test::kSanitized ? 200 : 1000;  // multinomial samples per power estimate
  // Second tokens after x against the path's law and the bug's, and the test's power there;
  // returns the figures.
  const auto judge = [&](const std::vector<long>& second, long same_step) {
    const long n = std::accumulate(second.begin(), second.end(), 0L);
    const test::ChiSquare chi = test::chi_square(second, right);
    INFO("second tokens against the path's law: chi2 " << chi.statistic << " df " << chi.df << " p-value "
                                                       << chi.p_value);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > kAlpha);
    // The bug: rows of drafted nodes read the committed prefix's counts. Second tokens drawn
    // in x's step would follow the prefix's law, the others the path's.
    const double share = static_cast<double>(same_step) / static_cast<double>(n);
    std::vector<double> buggy(right.size());
    for (std::size_t v = 0; v < buggy.size(); ++v) buggy[v] = share * wrong[v] + (1 - share) * right[v];
    const test::ChiSquare planted = test::chi_square(second, buggy);
    INFO("against the bug's law: chi2 " << planted.statistic << " p-value " << planted.p_value);
    if (!test::kSanitized) CHECK(planted.p_value < kAlpha);
    // The power at this n against laws between the path's and the prefix's: at TV 0.01, and the
    // TV where it reaches 0.8 (infinite: not by the prefix's law itself).
    const double power = test::chi_square_power(right, test::toward(right, wrong, 0.01), n, kAlpha, trials, 7);
    const double tv80 = test::tv_at_power(right, wrong, n, kAlpha, 0.8, trials, 7);
    std::ostringstream out;
    out << n << " runs began with x, " << same_step << " drew the second token in x's step; TV(path, bug) "
        << share * tv << "; p-values of the second token against the path's law " << chi.p_value
        << ", against the bug's " << planted.p_value << "; power against TV 0.01 " << power << ", 0.8 at TV "
        << tv80;
    return out.str();
  };
  std::vector<long> pooled(static_cast<std::size_t>(vocab), 0);
  long pooled_same_step = 0;
  for (std::size_t i = 0; i < draftings.size(); ++i) {
    const Drafting& d = draftings[i];
    INFO(d.name);
    const SecondTokens s = second_tokens(target_context, prompt_seq, prompt, first, *sampler, controls, d.make,
                                         d.bound, samples, 2026 + i);
    INFO(std::accumulate(s.second.begin(), s.second.end(), 0L)
         << " runs with first token x; " << s.same_step << " drew the second token in x's step");
    // Enough second tokens come from the node after x, or the test says nothing about it.
    REQUIRE(s.same_step >= samples / 10);
    const test::ChiSquare first_chi = test::chi_square(s.first, root);
    INFO("first tokens against their law: chi2 " << first_chi.statistic << " df " << first_chi.df << " p-value "
                                                 << first_chi.p_value);
    CHECK(first_chi.impossible == 0);  // no EOS: masked below the minimum
    CHECK(first_chi.p_value > kAlpha);
    const std::string figures = judge(s.second, s.same_step);
    WARN("controls under speculation, " << d.name << ", " << samples << " runs: p-value of the first token "
                                        << first_chi.p_value << "; " << figures);
    for (std::size_t v = 0; v < pooled.size(); ++v) pooled[v] += s.second[v];
    pooled_same_step += s.same_step;
  }
  // Every drafter's second tokens follow the same law: pooled, the test sees smaller biases.
  WARN("controls under speculation, the four drafters pooled: TV(path, prefix) " << tv << ", EOS in the path's law "
                                                                                << eos_mass << "; "
                                                                                << judge(pooled, pooled_same_step));
  cache.free(prompt_seq);
  draft_cache.free(draft_prompt_seq);
}

}  // namespace specula
