// The scheduler (runtime/scheduler.h): a request's tokens do not depend on the batch it ran
// in (mixed batches at 1, 4 and 16 sequences, shuffled arrivals; random arrivals under pools
// small enough to preempt, with the limits and the block count checked), a request that
// cannot fit alone is refused at submission, and speculative sampling inside a batch of 16
// keeps the target's distribution.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/error.h"
#include "base/rng.h"
#include "runtime/batch_run.h"
#include "runtime/decoders.h"
#include "runtime/draft_length_policy.h"
#include "runtime/scheduler.h"
#include "sampling/sampler.h"
#include "tests/test_support.h"
#include "tests/test_verify_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

ModelStore& store() {
  static ModelStore models;
  return models;
}

std::vector<std::vector<int>> reference_prompts() {
  std::ifstream in(test::source_path("tests/data/hf-greedy.json"));
  const auto j = nlohmann::json::parse(in);
  std::vector<std::vector<int>> prompts;
  for (const auto& entry : j["models"]["target-16m"]) prompts.push_back(entry["prompt_ids"].get<std::vector<int>>());
  return prompts;
}

// Copies of target-16m and draft-1m (weights linked) whose EOS is the newline token, so that
// samples end early, at different lengths.
struct NewlineEosModels {
  test::TempDir dir;
  std::string target, draft;
  NewlineEosModels() {
    const int newline = store().model(test::model_dir("target-16m")).tokenizer().encode("\n", false).back();
    auto copy = [&](const std::string& name) {
      const fs::path from = test::model_dir(name), to = dir.path / name;
      fs::create_directories(to);
      for (const auto& entry : fs::directory_iterator(from)) {
        const std::string file = entry.path().filename().string();
        if (file == "config.json" || file == "generation_config.json") {
          auto j = nlohmann::json::parse(test::slurp(entry.path()));
          j["eos_token_id"] = newline;
          std::ofstream(to / file) << j.dump();
        } else {
          fs::create_symlink(fs::absolute(entry.path()), to / file);
        }
      }
      return to.string();
    };
    target = copy("target-16m");
    draft = copy("draft-1m");
  }
};

const NewlineEosModels& eos_models() {
  static const NewlineEosModels models;
  return models;
}

// One request of the mixed batch: every drafter and sampler kind, several lengths.
GenerateOptions request(const std::string& target, const std::string& draft, int kind, std::vector<int> prompt,
                        int max_new_tokens) {
  GenerateOptions o;
  o.model_dir = target;
  o.prompt_ids = std::move(prompt);
  o.max_new_tokens = max_new_tokens;
  o.threads = 1;
  o.seed = 7 + static_cast<uint64_t>(kind);
  DraftOptions& d = o.draft;
  const bool sampled = kind % 2 == 1 && kind < 12;
  if (sampled) o.sampling = SamplingOptions::sample(1.0f, kind % 4 == 1 ? 0 : 20, 1.0f, 0.0f);
  switch (kind % 8) {
    case 0: case 1: break;  // plain
    case 2: case 3: d.method = DraftMethod::kModel; d.model_dir = draft; d.gamma = 3; break;  // chain
    case 4: case 5: d.method = DraftMethod::kModel; d.model_dir = draft; d.tree = {2, 2}; break;  // static tree
    case 6: d.method = DraftMethod::kModel; d.model_dir = draft; d.tree_budget = 6; break;  // dynamic tree
    case 7: d.method = DraftMethod::kNgram; d.gamma = 3; break;
  }
  if (kind == 9) d.method = DraftMethod::kModel, d.model_dir = draft, d.adaptive = true, d.gamma = 2;  // adaptive chain
  if (kind == 11) o.num_samples = 3;  // plain sampling, three samples side by side
  if (kind >= 12) {  // greedy chains whose length follows the load (12, 13) or the threshold policy (14, 15)
    d = {};
    d.method = kind % 2 == 0 ? DraftMethod::kModel : DraftMethod::kNgram;
    d.model_dir = kind % 2 == 0 ? draft : "";
    d.gamma = kind % 2 == 0 ? 4 : 3;
    o.gamma_policy = kind < 14 ? GammaPolicy::kLoad : GammaPolicy::kThreshold;
    if (kind >= 14) o.length_threshold = {kind == 14 ? 0.4 : 0.0, kind == 14 ? 3 : 2};
  }
  return o;
}

// The samples of `options` run alone (key `key`: the request's name in its Philox streams).
std::vector<std::vector<int>> alone(const GenerateOptions& options, uint64_t key) {
  Scheduler scheduler(store(), options, single_request_limits(options));
  const int r = scheduler.submit(options, key);
  scheduler.run();
  REQUIRE(scheduler.kv_stats().blocks_in_use == 0);
  return scheduler.outcome(r).samples;
}

SchedulerLimits roomy(int max_sequences, const std::vector<GenerateOptions>& requests) {
  SchedulerLimits limits;
  limits.max_sequences = max_sequences;
  limits.kv_blocks = 0;
  for (const GenerateOptions& o : requests) limits.kv_blocks += request_kv_blocks(o, o.num_samples);
  return limits;
}

}  // namespace

TEST_CASE("every request of a mixed batch gets the tokens it gets alone, at any batch size and arrival order",
          "[runtime][scheduler]") {
  const NewlineEosModels& m = eos_models();
  const auto prompts = reference_prompts();
  std::vector<GenerateOptions> requests;
  // 12-15: greedy under the load and threshold policies (sampled ones depend on the load by design)
  const int kinds = 16;
  for (int kind = 0; kind < kinds; ++kind) {
    const auto& p = prompts[static_cast<std::size_t>(kind) % prompts.size()];
    const int length = 4 + 5 * kind;  // 4 .. 69 prompt tokens
    requests.push_back(request(m.target, m.draft, kind, std::vector<int>(p.begin(), p.begin() + length),
                               test::kSanitized ? 6 : 6 + 2 * (kind % 5)));
  }
  std::vector<std::vector<std::vector<int>>> want;
  bool early_eos = false;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    want.push_back(alone(requests[i], i));
    for (const auto& sample : want.back())
      early_eos |= static_cast<int>(sample.size()) < requests[i].max_new_tokens;
  }
  CHECK(early_eos);  // the batch mixes lengths: some samples end at EOS
  for (std::size_t i = 12; i < requests.size(); ++i) {  // greedy under a length policy: plain greedy's tokens
    GenerateOptions plain = requests[i];
    plain.draft = {};
    plain.gamma_policy = GammaPolicy::kFixed;
    CHECK(alone(plain, i) == want[i]);
  }

  std::mt19937 shuffle(3);
  for (int batch : {1, 4, 16}) {
    std::vector<std::size_t> order(requests.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (int arrival = 0; arrival < 2; ++arrival) {
      if (arrival > 0) std::shuffle(order.begin(), order.end(), shuffle);
      INFO("batch " << batch << ", arrival order " << arrival);
      Scheduler scheduler(store(), requests[0], roomy(batch, requests));
      std::vector<int> index(requests.size());
      for (std::size_t i : order) index[i] = scheduler.submit(requests[i], i);
      scheduler.run();
      for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO("request " << i);
        CHECK(scheduler.outcome(index[i]).samples == want[i]);
      }
      CHECK(scheduler.stats().max_sequences <= batch);
      if (batch > 1) CHECK(scheduler.stats().max_sequences > 1);  // requests did share forwards
      CHECK(scheduler.kv_stats().blocks_in_use == 0);
      CHECK(scheduler.draft_blocks_in_use() == 0);
    }
  }
}

TEST_CASE("the threshold policy drafts only in steps of at most draft.max_batch sequences", "[runtime][scheduler]") {
  const ThresholdLength policy(0.25, 3);
  for (int sequences = 1; sequences <= 5; ++sequences) {
    const std::optional<DraftBound> bound = policy.bound(StepView{sequences}, SequenceView{7});
    INFO(sequences << " sequences");
    REQUIRE(bound.has_value() == (sequences <= 3));
    if (bound) CHECK((bound->max_depth == 6 && bound->stop_below == 0.25 && bound->siblings == 0));
  }
  CHECK(ThresholdLength(0, 0).bound(StepView{1000}, SequenceView{2}).has_value());  // 0: no cut-off
  const std::optional<DraftBound> fixed = FixedLength(2).bound(StepView{1000}, SequenceView{5});
  REQUIRE(fixed.has_value());
  CHECK((fixed->max_depth == 4 && fixed->stop_below == 0 && fixed->siblings == 2));

  // Four greedy requests side by side, all the same length: with max_batch 3 no step drafts,
  // with 4 every step may; both give plain greedy's tokens.
  const auto prompts = reference_prompts();
  GenerateOptions o;
  o.model_dir = test::model_dir("target-16m");
  o.max_new_tokens = test::kSanitized ? 6 : 16;
  o.threads = 1;
  o.draft.method = DraftMethod::kModel;
  o.draft.model_dir = test::model_dir("draft-1m");
  o.draft.gamma = 3;
  o.gamma_policy = GammaPolicy::kThreshold;
  std::vector<GenerateOptions> requests;
  for (std::size_t i = 0; i < 4; ++i) {
    requests.push_back(o);
    requests.back().prompt_ids = prompts[i];
  }
  for (const int max_batch : {3, 4}) {
    INFO("max_batch " << max_batch);
    Scheduler scheduler(store(), requests[0], roomy(4, requests));
    for (std::size_t i = 0; i < requests.size(); ++i) {
      requests[i].length_threshold.max_batch = max_batch;
      scheduler.submit(requests[i], i);
    }
    scheduler.run();
    long drafted = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      GenerateOptions plain = requests[i];
      plain.draft = {};
      plain.gamma_policy = GammaPolicy::kFixed;
      CHECK(scheduler.outcome(static_cast<int>(i)).samples == alone(plain, i));
      drafted += scheduler.outcome(static_cast<int>(i)).spec.drafted;
      if (max_batch == 3) CHECK(scheduler.outcome(static_cast<int>(i)).draft_forwards == 0);  // never prefilled
    }
    CHECK(scheduler.stats().max_sequences == 4);
    CHECK((max_batch == 3 ? drafted == 0 : drafted > 0));
  }

  // The confidence stop: chains end early, the tokens stay plain greedy's.
  GenerateOptions fixed_chain = requests[0], stopped = requests[0];
  fixed_chain.gamma_policy = GammaPolicy::kFixed;
  fixed_chain.length_threshold = {};
  stopped.length_threshold = {0.9, 0};
  const auto run = [](const GenerateOptions& options) {
    Scheduler scheduler(store(), options, single_request_limits(options));
    scheduler.submit(options);
    scheduler.run();
    return scheduler.outcome(0);
  };
  const RequestOutcome a = run(fixed_chain), b = run(stopped);
  CHECK(a.samples == b.samples);
  CHECK(b.spec.drafted < a.spec.drafted);
}

TEST_CASE("random arrivals in small pools: preemption, limits kept, own tokens, no block leaked",
          "[runtime][scheduler]") {
  const NewlineEosModels& m = eos_models();
  const auto prompts = reference_prompts();
  std::mt19937 rng(11);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  long preemptions = 0;
  const int iterations = test::kSanitized ? 2 : 5;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    std::vector<GenerateOptions> requests;
    const int count = uniform(4, 9);
    for (int i = 0; i < count; ++i) {
      const auto& p = prompts[static_cast<std::size_t>(uniform(0, static_cast<int>(prompts.size()) - 1))];
      const int length = uniform(2, 40);
      GenerateOptions o = request(m.target, m.draft, uniform(0, 13), std::vector<int>(p.begin(), p.begin() + length),
                                  uniform(1, 12));
      o.kv_block_size = 4;
      requests.push_back(o);
    }
    SchedulerLimits limits;
    limits.max_sequences = uniform(2, 8);
    limits.prefill_tokens = uniform(3, 24);
    limits.max_rows = uniform(8, 32);
    int alone_max = 0;
    for (const GenerateOptions& o : requests) {
      alone_max = std::max(alone_max, request_kv_blocks(o, 1));
      limits.max_rows = std::max(limits.max_rows, 1 + max_tree_nodes(o.draft));  // else refused at submission
    }
    limits.kv_blocks = alone_max + uniform(0, 6);  // little more than the largest request alone
    INFO("iteration " << iteration << ": " << count << " requests, " << limits.max_sequences << " sequences, "
                      << limits.max_rows << " rows, " << limits.prefill_tokens << " prefill tokens, "
                      << limits.kv_blocks << " blocks");
    Scheduler scheduler(store(), requests[0], limits);
    std::vector<int> index(requests.size(), -1);
    std::size_t next = 0;
    while (next < requests.size() || !scheduler.idle()) {
      // Random arrivals: zero to two requests join before each step.
      for (int joining = uniform(0, 2); joining > 0 && next < requests.size(); --joining, ++next)
        index[next] = scheduler.submit(requests[next], next);
      if (!scheduler.idle()) scheduler.step();
      CHECK(scheduler.live_sequences() <= limits.max_sequences);
      CHECK(scheduler.kv_stats().blocks_in_use <= limits.kv_blocks);
    }
    CHECK(scheduler.stats().max_rows <= limits.max_rows);
    CHECK(scheduler.stats().max_sequences <= limits.max_sequences);
    CHECK(scheduler.kv_stats().blocks_in_use == 0);
    CHECK(scheduler.draft_blocks_in_use() == 0);
    preemptions += scheduler.stats().preemptions;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i);
      REQUIRE(scheduler.outcome(index[i]).done);
      CHECK(scheduler.outcome(index[i]).samples == alone(requests[i], i));
    }
  }
  CHECK(preemptions > 0);  // the pools were small enough to force it
}

TEST_CASE("cancelled requests free every block and leave the others' tokens as they are alone, released records go",
          "[runtime][scheduler]") {
  const NewlineEosModels& m = eos_models();
  const auto prompts = reference_prompts();
  std::mt19937 rng(23);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int cancelled_live = 0;
  const int iterations = test::kSanitized ? 1 : 3;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    std::vector<GenerateOptions> requests;
    for (int i = 0; i < 8; ++i) {
      const auto& p = prompts[static_cast<std::size_t>(uniform(0, static_cast<int>(prompts.size()) - 1))];
      GenerateOptions o = request(m.target, m.draft, uniform(0, 13), std::vector<int>(p.begin(), p.begin() + uniform(2, 30)),
                                  uniform(4, 16));
      o.kv_block_size = 4;
      requests.push_back(o);
    }
    SchedulerLimits limits = roomy(3, requests);
    limits.kv_blocks = limits.kv_blocks / 3;  // small enough to preempt
    for (const GenerateOptions& o : requests) {
      limits.kv_blocks = std::max(limits.kv_blocks, request_kv_blocks(o, 1) + 2);
      limits.max_rows = std::max(limits.max_rows, 1 + max_tree_nodes(o.draft));
    }
    INFO("iteration " << iteration << ": " << limits.kv_blocks << " blocks");
    Scheduler scheduler(store(), requests[0], limits);
    std::vector<int> index;
    for (std::size_t i = 0; i < requests.size(); ++i) index.push_back(scheduler.submit(requests[i], i));
    CHECK_THROWS_WITH(scheduler.release(index[1]), Catch::Contains("not finished"));
    std::vector<bool> cancelled(requests.size(), false);
    while (!scheduler.idle()) {
      // Before each step, a one-in-four chance that one unfinished request (queued, parked,
      // live or preempted) is cancelled.
      const std::size_t victim = static_cast<std::size_t>(uniform(0, 4 * static_cast<int>(requests.size()) - 1));
      if (victim < requests.size() && !scheduler.outcome(index[victim]).done) {
        cancelled_live += scheduler.outcome(index[victim]).started_s > 0;
        scheduler.cancel(index[victim]);
        cancelled[victim] = true;
      }
      scheduler.step();
    }
    CHECK(scheduler.kv_stats().blocks_in_use == 0);
    CHECK(scheduler.draft_blocks_in_use() == 0);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i << (cancelled[i] ? " (cancelled)" : ""));
      const RequestOutcome& out = scheduler.outcome(index[i]);
      REQUIRE(out.done);
      CHECK(out.cancelled == cancelled[i]);
      const std::vector<std::vector<int>> own = alone(requests[i], i);
      if (!cancelled[i]) {
        CHECK(out.samples == own);
        continue;
      }
      REQUIRE(out.samples.size() == own.size());
      for (std::size_t k = 0; k < own.size(); ++k) {
        REQUIRE(out.samples[k].size() <= own[k].size());
        CHECK(std::equal(out.samples[k].begin(), out.samples[k].end(), own[k].begin()));
      }
      const nlohmann::json json = request_json(store().model(requests[i].model_dir), requests[i], out, scheduler.kv_stats(), 0);
      if (out.samples[0].size() < own[0].size()) CHECK(json["finish_reason"] == "cancelled");
    }
    scheduler.cancel(index[0]);  // a finished request is left as it is
    CHECK(scheduler.outcome(index[0]).cancelled == cancelled[0]);
    scheduler.release(index[0]);
    CHECK_THROWS_WITH(scheduler.outcome(index[0]), Catch::Contains("released"));
    CHECK_THROWS_WITH(scheduler.release(index[0]), Catch::Contains("released already"));
    scheduler.cancel(index[0]);  // a released request is left as it is
  }
  CHECK(cancelled_live > 0);  // sequences were cancelled while they held blocks
}

TEST_CASE("a request that cannot fit even alone is refused at submission", "[runtime][scheduler]") {
  GenerateOptions o;
  o.model_dir = test::model_dir("target-16m");
  o.prompt_ids = std::vector<int>(40, 5);
  o.max_new_tokens = 40;
  o.kv_block_size = 4;
  SchedulerLimits limits;
  limits.kv_blocks = 10;
  Scheduler scheduler(store(), o, limits);
  CHECK_THROWS_WITH(scheduler.submit(o), Catch::Contains("needs 33 KV blocks") && Catch::Contains("10 blocks"));
  o.draft.method = DraftMethod::kNgram;
  o.draft.gamma = 8;
  limits.kv_blocks = 100;
  limits.max_rows = 8;
  Scheduler narrow(store(), o, limits);
  CHECK_THROWS_WITH(narrow.submit(o), Catch::Contains("needs 9 rows") && Catch::Contains("max_rows (8)"));
  CHECK(narrow.idle());
}

// A beam search runs alone, in a KV cache of its own (Scheduler::run_beam): its stats must
// still say what it did -- its own cache's blocks, its prefill timed apart from its decode,
// and its forwards counted in the batch summary (once reported as 0 blocks, ~10^8 prefill
// tokens/s and no forwards).
TEST_CASE("a beam request reports its own cache, its prefill time and its forwards", "[runtime][scheduler]") {
  for (const DraftMethod method : {DraftMethod::kNone, DraftMethod::kNgram}) {
    INFO("drafter " << name_of(method));
    GenerateOptions o;
    o.model_dir = test::model_dir("target-16m");
    o.prompt_ids = reference_prompts().at(0);
    o.max_new_tokens = 12;
    o.threads = 1;
    o.sampling.strategy = Strategy::kBeam;
    o.sampling.beam_width = 4;
    o.draft.method = method;
    o.draft.gamma = 2;
    const BatchRun run = run_requests(store(), std::span(&o, 1), 1);
    REQUIRE(run.results.size() == 1);
    const nlohmann::json& stats = run.results[0].at("stats");
    CHECK(stats.at("kv").at("blocks_peak").get<int>() >= 4);  // at least one block per beam
    CHECK(stats.at("kv").at("blocks_in_use_at_end") == 0);
    // A 16M-parameter model cannot prefill a million tokens a second on a CPU (28 MFLOP a row).
    const double prefill_rate = stats.at("prefill_tokens_per_s").get<double>();
    CHECK(prefill_rate > 0);
    CHECK(prefill_rate < 1e6);
    const nlohmann::json& summary = run.summary;
    const int forwards = stats.at("target_forwards").get<int>();
    CHECK(forwards >= 2);
    CHECK(summary.at("target_forwards") == forwards);
    CHECK(summary.at("rows_per_forward").get<double>() * forwards == Approx(stats.at("target_rows").get<double>()));
    CHECK(summary.at("mean_occupancy").get<double>() > 1.0);  // the beams share each forward after the prompt
    CHECK(summary.at("mean_occupancy").get<double>() <= 4.0);
  }
}

// Speculative sampling inside a batch: the studied request's samples run 16 sequences at a
// time next to other requests' sequences (plain sampling, n-grams), so its rows share every
// forward; it runs with a fixed chain (gamma 3) and under the load policy (0..3 per step).
// Its first emitted tokens must follow p = transform(target logits after the prompt):
// Pearson chi-square at alpha = 1e-3, N = 2000 samples, on the reference prompt of highest
// next-token entropy (its two most probable tokens have p = 0.053 and 0.051; about 70 degrees
// of freedom after pooling, critical value 112.3). Power: moving 3.5% of the mass from the
// first token to the second has noncentrality N * 0.035^2 * (1/0.053 + 1/0.051) = 94, which
// the test rejects with probability about 0.99; the test runs the chi-square against that
// planted distribution too and requires the rejection. Under the sanitizers N = 200 (a smoke
// test; test_verify_lossless.cpp carries the high-power claims).
TEST_CASE("speculative sampling inside a batch of 16 follows the target distribution",
          "[runtime][scheduler][statistical]") {
  const std::string target_dir = test::model_dir("target-16m");
  const Backend& target = store().get(target_dir);
  // Of the reference prompts' first 24 tokens, the one whose next token is least predictable
  // (most cells, most power).
  std::vector<int> prompt;
  double best_entropy = -1;
  for (const auto& reference : reference_prompts()) {
    const std::vector<int> candidate(reference.begin(), reference.begin() + 24);
    std::vector<float> logits(static_cast<std::size_t>(target.config().vocab_size)), p(logits.size());
    KvCache cache(target.kv_layout(16), 16);
    const auto workspace = target.make_workspace();
    cache.free(prefill(ForwardContext{target, cache, *workspace}, candidate, logits));
    make_sampler(SamplingOptions::sample())->distribution(logits, p);
    double entropy = 0;
    for (float x : p) entropy -= x > 0 ? x * std::log(double(x)) : 0.0;
    if (entropy > best_entropy) best_entropy = entropy, prompt = candidate;
  }
  GenerateOptions studied;
  studied.model_dir = target_dir;
  studied.prompt_ids = prompt;
  studied.max_new_tokens = 2;
  studied.threads = 1;
  studied.seed = 99;
  studied.sampling = SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f);
  studied.draft.method = DraftMethod::kModel;
  studied.draft.model_dir = test::model_dir("draft-1m");
  studied.draft.gamma = 3;
  studied.num_samples = test::kSanitized ? 200 : 2000;

  // Exact p of the first token, from a lone prefill.
  std::vector<float> logits(static_cast<std::size_t>(target.config().vocab_size)), p(logits.size());
  {
    KvCache cache(target.kv_layout(16), 16);
    const auto workspace = target.make_workspace();
    const int seq = prefill(ForwardContext{target, cache, *workspace}, prompt, logits);
    cache.free(seq);
  }
  make_sampler(studied.sampling)->distribution(logits, p);

  for (const GammaPolicy policy : {GammaPolicy::kFixed, GammaPolicy::kLoad}) {
    INFO("gamma policy " << name_of(policy));  // load: chain lengths 0..3 chosen per step
    studied.gamma_policy = policy;
    SchedulerLimits limits;
    limits.max_sequences = 16;
    GenerateOptions background = studied;
    background.draft = {};
    background.gamma_policy = GammaPolicy::kFixed;
    background.num_samples = test::kSanitized ? 20 : 200;
    background.max_new_tokens = 4;
    GenerateOptions ngram = background;
    ngram.draft.method = DraftMethod::kNgram;
    limits.kv_blocks = request_kv_blocks(studied, 16) + request_kv_blocks(background, 16) + request_kv_blocks(ngram, 16);
    Scheduler scheduler(store(), studied, limits);
    scheduler.submit(background, 1);
    const int r = scheduler.submit(studied, 2);
    scheduler.submit(ngram, 3);
    scheduler.run();
    CHECK(scheduler.stats().max_sequences == 16);

    const RequestOutcome& out = scheduler.outcome(r);
    std::vector<long> counts(p.size(), 0);
    for (const auto& sample : out.samples) ++counts[static_cast<std::size_t>(sample.at(0))];
    const std::vector<double> probs(p.begin(), p.end());
    const test::ChiSquare chi = test::chi_square(counts, probs);
    INFO("chi2 " << chi.statistic << " df " << chi.df << " p-value " << chi.p_value);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > 1e-3);
    // The fixed chain drafts every step. The load policy picks its lengths from measured step
    // costs, so whether it drafts at all depends on the machine and the build (under ASan it
    // may never): its lengths, 0 included, must keep the distribution either way.
    if (policy == GammaPolicy::kFixed) CHECK(out.spec.accepted > 0);
    if (!test::kSanitized) {
      // The planted bias: 3.5% of the mass moved from the most probable token to the second.
      std::vector<std::size_t> top(probs.size());
      for (std::size_t i = 0; i < top.size(); ++i) top[i] = i;
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), [&](std::size_t a, std::size_t b) { return probs[a] > probs[b]; });
      std::vector<double> biased = probs;
      const double shift = std::min(0.035, biased[top[0]]);
      biased[top[0]] -= shift;
      biased[top[1]] += shift;
      const test::ChiSquare planted = test::chi_square(counts, biased);
      INFO("top probabilities " << probs[top[0]] << ", " << probs[top[1]]);
      INFO("against the planted bias: chi2 " << planted.statistic << " p-value " << planted.p_value);
      CHECK(planted.p_value < 1e-3);
    }
  }
}

}  // namespace specula

namespace specula {

// `specula generate --prompts-file`: one JSON line per prompt in the file's order (each the
// tokens its prompt gets alone, with its id and latency), then one summary without "ids";
// a malformed line is refused naming the file and line.
TEST_CASE("cli: generate --prompts-file --batch-size prints each prompt's object in order, then a summary",
          "[runtime][scheduler][cli]") {
  const std::string model = test::model_dir("target-16m"), draft = test::model_dir("draft-1m");
  test::TempDir dir;
  const std::string file = dir.file("prompts.jsonl");
  std::ofstream(file) << R"({"id": "b", "prompt": "def main():"})" "\n"
                      << R"({"id": "a", "prompt_ids": [1, 265, 4027]})" "\n\n"
                      << R"({"id": "c", "prompt": "static int"})" "\n";
  for (const std::string& drafting : std::vector<std::string>{"", " --draft '" + draft + "' --gamma 2"}) {
    INFO(drafting);
    const test::Outcome o = test::run_specula("generate --model '" + model + "' --prompts-file '" + file +
                                              "' --batch-size 2 --max-new-tokens 6 --threads 1 --json" + drafting);
    REQUIRE(o.status == 0);
    std::vector<nlohmann::json> lines;
    std::istringstream out(o.out);
    for (std::string line; std::getline(out, line);) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 4);
    const std::vector<std::string> ids = {"b", "a", "c"};
    const std::vector<std::string> alone = {"--prompt 'def main():'", "--prompt-ids 1,265,4027", "--prompt 'static int'"};
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(lines[i].at("id") == ids[i]);
      CHECK(lines[i].at("latency").at("latency_s").get<double>() > 0);
      const test::Outcome one =
          test::run_specula("generate --model '" + model + "' " + alone[i] + " --max-new-tokens 6 --threads 1 --json" + drafting);
      REQUIRE(one.status == 0);
      CHECK(lines[i].at("ids") == nlohmann::json::parse(one.out).at("ids"));
    }
    const nlohmann::json& summary = lines[3];
    CHECK_FALSE(summary.contains("ids"));
    CHECK(summary.at("requests") == 3);
    CHECK(summary.at("new_tokens") == 18);
    CHECK(summary.at("throughput_tokens_per_s").get<double>() > 0);
    CHECK(summary.at("latency_s").at("p99").get<double>() >= summary.at("latency_s").at("p50").get<double>());
    CHECK(summary.at("mean_occupancy").get<double>() > 1.0);  // two sequences shared forwards
  }
  std::ofstream(file, std::ios::app) << "[1, 2]\n";
  const test::Outcome bad = test::run_specula("generate --model '" + model + "' --prompts-file '" + file + "' --json");
  CHECK(bad.status == 1);
  CHECK(bad.err == "specula: error: --prompts-file " + file + ":5: not a JSON object\n");
  const test::Outcome stray = test::run_specula("generate --model '" + model + "' --prompt hi --batch-size 4");
  CHECK(stray.status != 0);
  CHECK(stray.err.find("--batch-size requires --prompts-file") != std::string::npos);
}

namespace {

// The JSON lines of a --prompts-file run: the requests' objects, then the summary.
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace

// A KV pool too small for the batch's sequences, set by --kv-pool-blocks or run.kv_pool_blocks,
// preempts them, and every request still gets the tokens it gets alone (greedy), plain and
// with a draft model.
TEST_CASE("cli: a tight --kv-pool-blocks or run.kv_pool_blocks preempts and keeps each request's lone tokens",
          "[runtime][scheduler][cli]") {
  const std::string model = test::model_dir("target-16m"), draft = test::model_dir("draft-1m");
  const std::vector<std::string> prompts = {"def main():", "static int x", "for i in range(10):"};
  constexpr int kPool = 12;  // blocks of 4 slots: one request alone needs 10 at most
  test::TempDir dir;
  const std::string file = dir.file("prompts.jsonl");
  {
    std::ofstream out(file);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      out << nlohmann::json{{"id", std::to_string(i)}, {"prompt", prompts[i]}}.dump() << "\n";
  }
  const std::string common = "generate --model '" + model + "' --prompts-file '" + file +
                             "' --max-new-tokens 16 --kv-block-size 4 --threads 1 --json";
  const std::string drafting = " --draft '" + draft + "' --gamma 2";
  std::map<std::string, std::vector<nlohmann::json>> alone;  // draft method -> the requests alone
  for (const std::string& mode : {std::string(), drafting}) {
    INFO("mode:" << mode);
    const test::Outcome one = test::run_specula(common + mode + " --batch-size 1");
    const test::Outcome tight = test::run_specula(common + mode + " --batch-size 3 --kv-pool-blocks " + std::to_string(kPool));
    INFO("stderr: " << one.err << tight.err);
    REQUIRE(one.status == 0);
    REQUIRE(tight.status == 0);
    const std::vector<nlohmann::json> a = json_lines(one.out), t = json_lines(tight.out);
    REQUIRE(a.size() == prompts.size() + 1);
    REQUIRE(t.size() == prompts.size() + 1);
    CHECK(a.back().at("preemptions") == 0);
    CHECK(t.back().at("preemptions").get<int>() > 0);
    CHECK(t.back().at("kv_pool_blocks") == kPool);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CHECK(t[i].at("ids") == a[i].at("ids"));
      CHECK(t[i].at("stats").at("kv").at("pool_blocks") == kPool);
    }
    alone[mode.empty() ? "none" : "model"] = a;
  }
  // The same pool from a config: the job's line records it and its preemptions.
  const std::string config = dir.file("tight.toml");
  std::ofstream(config) << "[target]\npath = \"" << model << "\"\n[draft]\nmethod = \"model\"\npath = \"" << draft
                        << "\"\ngamma = 2\n[run]\nprompts = " << nlohmann::json(prompts).dump()
                        << "\nmax_new_tokens = 16\nkv_block_size = 4\nthreads = 1\nbatch_size = 3\nkv_pool_blocks = " << kPool
                        << "\nrepetitions = 1\n[output]\nformats = [\"csv\"]\n";
  const test::Outcome run = test::run_specula("run '" + config + "' --quiet --out '" + dir.file("out") + "'");
  INFO("stderr: " << run.err);
  REQUIRE(run.status == 0);
  std::vector<nlohmann::json> lines;
  {
    std::ifstream in(dir.file("out") + "/results.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  REQUIRE(lines.size() == 2);  // the drafting run's job and its plain baseline's
  for (const nlohmann::json& job : lines) {
    const std::string method = job.at("settings").at("draft").at("method");
    INFO("draft method " << method);
    CHECK(job.at("settings").at("kv_pool_blocks") == kPool);
    CHECK(job.at("stats").at("kv_pool_blocks") == kPool);
    CHECK(job.at("stats").at("preemptions").get<int>() > 0);
    REQUIRE(job.at("requests").size() == prompts.size());
    for (std::size_t i = 0; i < prompts.size(); ++i) CHECK(job.at("requests")[i].at("ids") == alone.at(method)[i].at("ids"));
  }
}

// A queued request's prefill rate is its own prefill's: identical prompts run one at a time
// prefill at much the same rate whatever their place in the queue, and the wait before each
// is reported apart (queue_s), growing with its place.
TEST_CASE("cli: generate --prompts-file reports each request's prefill rate and queue wait apart",
          "[runtime][scheduler][cli]") {
  const std::string model = test::model_dir("target-16m");
  test::TempDir dir;
  const std::string file = dir.file("prompts.jsonl");
  nlohmann::json ids = nlohmann::json::array({1});
  for (int i = 1; i < 192; ++i) ids.push_back(100 + 37 * i % 900);
  {
    std::ofstream out(file);
    for (int i = 0; i < 4; ++i) out << nlohmann::json{{"id", std::to_string(i)}, {"prompt_ids", ids}}.dump() << "\n";
  }
  const test::Outcome o = test::run_specula("generate --model '" + model + "' --prompts-file '" + file +
                                            "' --batch-size 1 --max-new-tokens 8 --threads 1 --json");
  INFO("stderr: " << o.err);
  REQUIRE(o.status == 0);
  std::vector<nlohmann::json> stats;
  std::istringstream out(o.out);
  for (std::string line; std::getline(out, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("stats")) stats.push_back(j.at("stats"));
  }
  REQUIRE(stats.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("request " << i << ": " << stats[i].dump());
    CHECK(stats[i].at("prefill_tokens_per_s").get<double>() / stats[0].at("prefill_tokens_per_s").get<double>() > 0.5);
    // Each waits for the whole run of every request before it (a prefill and 8 decode steps).
    if (i > 0) CHECK(stats[i].at("queue_s").get<double>() > stats[i - 1].at("queue_s").get<double>());
  }
}

}  // namespace specula

namespace specula {

// The load policy's choice against a brute-force optimum of the same cost model, on costs
// it measured: target forwards cost a + b * rows, a draft round c + e * sequences.
TEST_CASE("the load policy picks the chain length of the most tokens per second", "[runtime][scheduler]") {
  struct Costs {
    double a, b, c, e;
  };
  for (const Costs k : {Costs{6e-3, 1.5e-3, 4e-4, 1e-4}, Costs{6e-3, 1e-5, 4e-4, 1e-5}, Costs{1e-3, 2e-3, 1e-3, 1e-3}}) {
    DraftLengthChooser chooser;
    const std::vector<double> alphas_probe = {0.5};
    for (int i = 0; i < 3; ++i) {  // nothing measured: plain steps first (the first ones run slow),
      CHECK(chooser.choose(0, 0, alphas_probe, 4) == 0);
      chooser.target_forward(1, k.a + k.b);
    }
    CHECK(chooser.choose(0, 0, alphas_probe, 4) == 2);  // then the probe, at batch 1 the scout's two tokens (no prefill seen: no row floor)
    for (int twice = 0; twice < 2; ++twice) {  // a row count's first figure is cold: each measured twice
      for (int rows : {1, 3, 8, 20, 64, 5, 40}) chooser.target_forward(rows, k.a + k.b * rows);
      for (int n : {1, 4, 16, 2}) chooser.draft_round(n, k.c + k.e * n);
    }
    for (int batch : {1, 4, 16, 32}) {
      for (double alpha : {0.2, 0.6, 0.9}) {
        const std::vector<double> alphas(static_cast<std::size_t>(batch), alpha);
        int best = 0;
        double best_rate = 0;
        for (int g = 0; g <= 4; ++g) {
          const double tokens = batch * expected_chain_tokens(alpha, g);
          const double rate = tokens / (k.a + k.b * batch * (1 + g) + g * (k.c + k.e * batch));
          if (rate > best_rate) best = g, best_rate = rate;
        }
        // Drafting must promise kMargin more than plain where the step has more than one sequence.
        const double margin = batch == 1 ? 0 : DraftLengthChooser::kMargin;
        if (best_rate <= (1 + margin) * batch / (k.a + k.b * batch)) best = 0;
        INFO("batch " << batch << " alpha " << alpha);
        CHECK(chooser.choose(0, 0, alphas, 4) == best);
      }
    }
  }
  CHECK(expected_chain_tokens(0.5, 2) == Approx(1.75));
  CHECK(expected_chain_tokens(1.0, 3) == 4);
}

// Per-depth acceptance: the counts a chain step adds, the expected tokens they give, and the
// chooser on them. Chains whose first token is accepted half the time and every later one
// 9 times in 10 once the first was (an n-gram match, an easy stretch) have a chain MLE of
// about 0.73; the geometric chain at 0.73 overvalues one drafted token (1.73 against 1.5
// tokens) and undervalues four (3.13 against 2.72, by rate), so on the same costs it chooses
// worse in both directions.
TEST_CASE("the load policy prices chains from acceptance per depth", "[runtime][scheduler]") {
  ChainAcceptance a;
  a.add(3, 1, true);   // tried depths 1, 2; passed 1
  a.add(2, 2, true);   // tried and passed 1, 2
  a.add(4, 0, true);   // tried 1
  a.add(5, 3, false);  // a tree step: totals only
  CHECK(a.accepted == 6);
  CHECK(a.trials == 1 + 1 + 2 + 0 + 1 + 3 + 1);
  CHECK(a.tried_at == std::vector<double>{3, 2});
  CHECK(a.passed_at == std::vector<double>{2, 1});
  // No per-depth evidence: the geometric chain at the chain estimate.
  ChainAcceptance none, pool;
  pool.add(1, 1, false), pool.add(1, 1, false), pool.add(1, 0, false);  // chain evidence only: (2 + 1) / (3 + 2)
  const std::vector<double> flat = chain_price(none, pool, 4, 8).tokens;
  REQUIRE(flat.size() == 5);
  for (int g = 0; g <= 4; ++g) CHECK(flat[static_cast<std::size_t>(g)] == Approx(expected_chain_tokens(0.6, g)));
  // A lone request's prior is the other requests' evidence, not its own again: two
  // rejections of its first drafted token give p_1 = 8 · 0.4 / 10 (α = 4 / 10 from a 0.5
  // prior worth 8 trials), where counting them in the prior too gave 0.08; a second request
  // starts from the first's (1 + 0) / (2 + 2).
  ChainAcceptance rejected;
  rejected.add(2, 0, true), rejected.add(3, 0, true);
  CHECK(chain_price(rejected, rejected, 1, 8).tokens[1] == Approx(1.32));
  CHECK(chain_estimate(ChainAcceptance{}, rejected, 8) == Approx(0.25));
  // A request's level, the others' shape: the others pass depth 1 three times in ten and
  // depth 2 half the time after it; this request passed 16 of 20 one-token chains. Its depth-2
  // prior is the others' depth-2 rate moved by the log-odds between its chain estimate and
  // theirs (0.79), not the others' 0.50, which priced its second token below its first.
  ChainAcceptance low, high;
  for (int i = 0; i < 1000; ++i) low.add(2, i < 150 ? 2 : i < 300 ? 1 : 0, true);
  for (int i = 0; i < 20; ++i) high.add(1, i < 16 ? 1 : 0, true);
  ChainAcceptance both = low;  // the pool: both requests' steps
  for (int i = 0; i < 20; ++i) both.add(1, i < 16 ? 1 : 0, true);
  const std::vector<double> level = chain_price(high, both, 2, 8).tokens;
  CHECK(level[1] == Approx(1.749).margin(0.002));
  CHECK(level[2] - level[1] == Approx(0.749 * 0.793).margin(0.003));
  // Correlated acceptance, chains of 4.
  ChainAcceptance steps;
  Philox rng(11);
  for (int i = 0; i < 20000; ++i) {
    int accepted = 0;
    while (accepted < 4 && rng.uniform() < (accepted == 0 ? 0.5 : 0.9)) ++accepted;
    steps.add(4, accepted, true);
  }
  const double alpha = steps.rate(0.5, 0);
  CHECK(alpha == Approx(0.73).margin(0.01));
  const std::vector<double> depth_tokens = chain_price(steps, steps, 4, 8).tokens;
  const double truth[] = {1, 1.5, 1.95, 2.355, 2.7195};
  for (int g = 0; g <= 4; ++g) CHECK(depth_tokens[static_cast<std::size_t>(g)] == Approx(truth[g]).margin(0.02));
  const std::vector<std::vector<double>> by_depth = {depth_tokens};
  const std::vector<double> geometric = {alpha};
  // Steps of 1 ms plus `per_row` a chain row, draft rounds of 10 us: cheap rows, where four
  // tokens pay best and the geometric chain stops at three; dear rows, where one drafted
  // token loses (1.5 tokens in 1.61 ms) and the geometric chain drafts it (1.73 tokens: 7%
  // over plain; a lone sequence drafts with no margin over plain).
  for (const auto& [per_row, best, geometric_choice] : {std::tuple{2e-4, 4, 3}, std::tuple{6e-4, 0, 1}}) {
    DraftLengthChooser chooser;
    for (int rows : {1, 2, 3, 5}) chooser.target_forward(rows, 1e-3 + per_row * (rows - 1));
    chooser.draft_round(1, 1e-5);
    INFO("per row " << per_row);
    CHECK(chooser.choose(0, 0, by_depth, 4) == best);
    CHECK(chooser.choose(0, 0, geometric, 4) == geometric_choice);
  }
}

}  // namespace specula

namespace specula {

// --prompts-file reads the experiments' prompt lines: a chat line is rendered with the model's
// chat_template as --chat renders its message, and decodes to the tokens --chat gets alone.
TEST_CASE("cli: generate --prompts-file takes chat lines, with --chat's rendering", "[runtime][scheduler][cli][chat]") {
  test::TempDir dir;
  const fs::path model = dir.path / "chat-model", from = test::model_dir("target-16m");
  fs::create_directories(model);
  for (const auto& entry : fs::directory_iterator(from))
    if (entry.path().filename() != "tokenizer_config.json") fs::create_symlink(fs::absolute(entry.path()), model / entry.path().filename());
  nlohmann::json config = nlohmann::json::parse(test::slurp(from / "tokenizer_config.json"));
  config["chat_template"] =  // Mistral-7B-Instruct-v0.1's
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
      "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
  std::ofstream(model / "tokenizer_config.json") << config.dump();
  const std::string file = dir.file("chat.jsonl");
  std::ofstream(file) << R"({"id": "t", "prompt": "def main():"})" "\n"
                      << R"({"id": "c", "messages": [{"role": "user", "content": "Name a colour."}], "note": "kept aside"})" "\n";
  const std::string m = "generate --model '" + model.string() + "' --max-new-tokens 5 --threads 1 --json";
  const test::Outcome batch = test::run_specula(m + " --prompts-file '" + file + "' --batch-size 2");
  INFO(batch.err);
  REQUIRE(batch.status == 0);
  std::vector<nlohmann::json> lines;
  std::istringstream out(batch.out);
  for (std::string line; std::getline(out, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 3);
  const test::Outcome chat = test::run_specula(m + " --chat 'Name a colour.'");
  REQUIRE(chat.status == 0);
  const nlohmann::json alone = nlohmann::json::parse(chat.out);
  CHECK(lines[1].at("id") == "c");
  CHECK(lines[1].at("stats").at("prompt_tokens") == alone.at("stats").at("prompt_tokens"));
  CHECK(lines[1].at("ids") == alone.at("ids"));
  CHECK(lines[1].at("stats").at("prompt_tokens").get<int>() > 8);  // the [INST] wrapping is there

  std::ofstream(file) << R"({"id": "c", "messages": [{"role": "system", "content": "x"}]})" "\n";
  const test::Outcome refused = test::run_specula(m + " --prompts-file '" + file + "'");
  CHECK(refused.status == 1);
  CHECK_THAT(refused.err, Catch::Contains("specula: error: --prompts-file " + file + ":1 (c): "));
  std::ofstream(file) << R"({"id": "c"})" "\n";
  const test::Outcome empty = test::run_specula(m + " --prompts-file '" + file + "'");
  CHECK(empty.err == "specula: error: --prompts-file " + file +
                         ":1: prompt 'c' needs exactly one of 'prompt' (a string), 'messages' (a chat) and 'prompt_ids' "
                         "(token ids)\n");
}

// The load policy's fallback: where its measured costs say the rows a chain adds cost more than
// the tokens it brings, it decodes plain (γ = 0); where extra rows are nearly free it drafts;
// and a long run of steps at one row count does not send it back to probing.
TEST_CASE("the load policy falls back to plain steps when its measured costs say speculation cannot pay",
          "[runtime][scheduler]") {
  const auto measured = [](double fixed, double per_row) {
    DraftLengthChooser chooser;
    for (int twice = 0; twice < 2; ++twice) {  // a row count's first figure is cold: each measured twice
      for (int rows : {1, 2, 3, 8, 16, 32, 64, 96, 128}) chooser.target_forward(rows, fixed + per_row * rows);
      for (int n : {1, 8, 32}) chooser.draft_round(n, 2e-4 + 5e-5 * n);
    }
    return chooser;
  };
  // Compute-bound rows (a row costs what a decode step costs at batch 32): plain at α = 0.6.
  DraftLengthChooser busy = measured(1e-3, 1e-3);
  const std::vector<double> batch32(32, 0.6);
  CHECK(busy.choose(0, 0, batch32, 4) == 0);
  // The same model at batch 1, where the weights' reading dominates: it drafts.
  DraftLengthChooser idle = measured(6e-3, 2e-5);
  const std::vector<double> one(1, 0.6);
  CHECK(idle.choose(0, 0, one, 4) > 0);
  // Drafting, every kPlainEvery-th step is plain, so the cost drafting is compared with stays
  // measured: 2 of 32 steps beside another row; a lone sequence's every kLonePlainEvery-th.
  for (const bool lone : {true, false}) {
    DraftLengthChooser drafting = measured(6e-3, 2e-5);
    const int every = lone ? DraftLengthChooser::kLonePlainEvery : DraftLengthChooser::kPlainEvery;
    int plain_steps = 0;
    for (int i = 0; i < 2 * every; ++i) plain_steps += drafting.choose(lone ? 0 : 1, lone ? 0 : 1, one, 4) == 0;
    CHECK(plain_steps == 2);
  }
  // 500 plain steps at 32 rows later (the policy's own choice) it still knows the longer
  // steps' cost and stays plain, where a fit that forgets would return to alternating.
  for (int i = 0; i < 500; ++i) {
    busy.target_forward(32, 1e-3 + 1e-3 * 32);
    CHECK(busy.choose(0, 0, batch32, 4) == 0);
  }
  // Before any probe: a prefill step bounds a row's cost from below, and where even a γ = 1
  // step at that bound loses to plain (compute-bound rows, batch 32) it never drafts to find
  // out; where rows are nearly free (batch 1) it probes (the scout's γ = 2: at batch 1 the
  // scout is the probe).
  for (const bool compute_bound : {true, false}) {
    const double fixed = compute_bound ? 1e-3 : 6e-3, per_row = compute_bound ? 1e-3 : 2e-5;
    const int batch = compute_bound ? 32 : 1;
    DraftLengthChooser fresh;
    fresh.prefill_step(24 * batch, fixed + per_row * 24 * batch);
    const std::vector<double> alphas(static_cast<std::size_t>(batch), 0.6);
    for (int i = 0; i < 3; ++i) {  // the plain step is measured first, three times
      CHECK(fresh.choose(0, 0, alphas, 4) == 0);
      fresh.target_forward(batch, fixed + per_row * batch);
    }
    CHECK(fresh.row_floor() == Approx(per_row * (24 * batch - batch) / (24 * batch)));
    for (int i = 0; i < 3; ++i) CHECK(fresh.choose(0, 0, alphas, 4) == (compute_bound ? 0 : 2));
  }
  // The phases follow what the fits hold: the plain step's figures, then a draft round, then
  // target steps of a second row count.
  {
    using Phase = DraftLengthChooser::Phase;
    DraftLengthChooser c;
    for (int i = 0; i < DraftLengthChooser::kPlainFigures; ++i) {
      CHECK(c.phase(4, 4) == Phase::kMeasuringPlain);
      c.target_forward(4, 1e-3);
    }
    CHECK(c.phase(4, 4) == Phase::kScouting);
    CHECK(c.phase(4, 1) == Phase::kProbing);  // a lone sequence's scout is its probe
    c.draft_round(3, 1e-4);
    CHECK(c.phase(4, 4) == Phase::kProbing);
    for (int i = 0; i < 2; ++i) c.target_forward(8, 2e-3);
    CHECK(c.phase(4, 4) == Phase::kChoosing);
  }
  // Batch 1, rows nearly free: the first draft round caught up on a 24-token prompt (25 rows,
  // 0.6 ms) after a γ = 1 probe that was rejected. Taken as the cost of every round (the old
  // single-observation rule) it priced γ = 1 at 1.05 + 0.6 ms for 1.6 tokens, below plain's 1
  // token a millisecond, and the policy never drafted again; a one-row round costs less.
  {
    DraftLengthChooser first;
    first.target_forward(1, 1.0e-3);
    first.target_forward(2, 1.05e-3);
    first.draft_round(25, 0.6e-3);
    const std::vector<double> alpha_06(1, 0.6);
    CHECK(first.choose(0, 0, alpha_06, 4) >= 1);
  }
  // Other sequences' rows count: 31 plain rows beside one chain at α = 0.6 under the busy costs.
  CHECK(busy.choose(31, 31, one, 4) == 0);
  // CostFit: smoothed per row count, interpolated, extrapolated with a slope >= 0.
  CostFit fit(true);
  CHECK(fit.at(5) == 0);
  fit.add(4, 1.0);
  CHECK(fit.at(100) == 1.0);
  CHECK(fit.at(2) == Approx(0.5));  // one row count seen: fewer rows at its cost per row, a lower bound
  fit.add(8, 2.0);
  CHECK(fit.at(6) == Approx(1.5));
  CHECK(fit.at(16) == Approx(4.0));
  CHECK(fit.at(2) == Approx(0.5));
  fit.add(8, 3.0);  // a row count's second figure replaces its first (one-time costs)
  CHECK(fit.at(8) == Approx(3.0));
  // Once a row count has two figures, one seen once (cold) is not used: 4 rows at 8's cost per row.
  CHECK(fit.at(4) == Approx(1.5));
  fit.add(4, 1.0);
  CHECK(fit.at(4) == Approx(1.0));
  CHECK(fit.at(6) == Approx(2.0));
  fit.add(8, 2.0);  // then the lower median of the last 5: {3, 2} -> 2
  CHECK(fit.at(8) == Approx(2.0));
  fit.add(8, 9.0);  // an outlier does not move it: {3, 2, 9} -> 3
  CHECK(fit.at(8) == Approx(3.0));
  for (int i = 0; i < 3; ++i) fit.add(8, 4.0);  // a drift moves it within 5: {2, 9, 4, 4, 4} -> 4
  CHECK(fit.at(8) == Approx(4.0));
  CostFit falling(true);
  falling.add(1, 2.0);
  falling.add(2, 1.0);
  CHECK(falling.at(10) == Approx(1.0));  // no negative slope beyond the observed range
}

// Before it drafts for a batch, the load policy scouts: one sequence (the one with the least
// to catch up) drafts two tokens, which prices the draft model on its rows and on a round of
// one row; the probe then drafts for all only where the saving over the tokens left repays
// the others' catch-up, its round of n sequences priced at n one-row rounds. Batch 8, a step
// of 2 ms + 50 us a row, a draft model at 100 us a row, chains of 1.8 tokens at γ = 1.
TEST_CASE("the load policy scouts on one sequence and prices the draft model's catch-up", "[runtime][scheduler]") {
  const auto tokens = [](double alpha) {
    std::vector<double> t;
    for (int g = 0; g <= 4; ++g) t.push_back(expected_chain_tokens(alpha, g));
    return t;
  };
  DraftLengthChooser chooser;
  chooser.prefill_step(8 * 24, 2e-3 + 5e-5 * 8 * 24);
  std::vector<LoadSequence> load(8, LoadSequence{tokens(0.8), 23, 40});
  load[5].catch_up_rows = 3;
  for (int i = 0; i < 3; ++i) {
    CHECK(chooser.choose(0, 0, load, 4).gamma == 0);  // the plain step, measured three times
    chooser.target_forward(8, 2e-3 + 5e-5 * 8);
  }
  // A late scout does not pay for itself: with 300 rows each to catch up (30 ms at 100 us a
  // row, bounded by the prefill's 48 us a row: 14 ms) and 4 tokens left, a γ = 1 step even with
  // free drafting saves 3.4 ms.
  std::vector<LoadSequence> late(8, LoadSequence{tokens(0.8), 300, 4});
  CHECK(chooser.choose(0, 0, late, 4).gamma == 0);
  const LoadChoice scout = chooser.choose(0, 0, load, 4);
  CHECK(scout.gamma == 2);
  CHECK(scout.scout == 5);
  chooser.draft_round(4, 4e-4);  // its catch-up and root: 100 us a row
  chooser.draft_round(1, 1e-4);  // its second token's round
  load[5].catch_up_rows = 0;
  // A γ = 1 step at its floor: 2.4 ms + 8 rows at the prefill's 48 us + 8 one-row rounds of
  // 0.1 ms, 14.4 tokens: 20% over plain. The others' 161 catch-up rows: 16.1 ms. 48 tokens
  // left each: the saving is 19.7 ms, so it probes; 20 left: 8.2 ms, so it stays plain.
  for (LoadSequence& s : load) s.remaining_tokens = 48;
  const LoadChoice probe = chooser.choose(0, 0, load, 4);
  CHECK(probe.gamma == 1);
  CHECK(probe.scout == -1);
  for (LoadSequence& s : load) s.remaining_tokens = 20;
  CHECK(chooser.choose(0, 0, load, 4).gamma == 0);
  // Nothing to catch up: the per-step gain alone decides.
  for (LoadSequence& s : load) s.catch_up_rows = 0;
  CHECK(chooser.choose(0, 0, load, 4).gamma == 1);
}

// Chains that end at a confidence stop (DraftBound::stop_below): the counts a stopped step
// adds, the chances of drafting each depth they give, and the chooser on them. A lone
// sequence, steps of 1 ms + 50 us a drafted row, draft rounds of 0.3 ms (0.35 for 2 rows),
// chains of 1.5 tokens at γ = 1 up to 1.68 at γ = 4.
TEST_CASE("the load policy prices chains that stop where their draft doubts them", "[runtime][scheduler]") {
  ChainAcceptance a;
  a.add(1, 1, true, true);   // drafted 1 and passed it, then stopped before a second
  a.add(1, 0, true, true);   // drafted 1, rejected, stopped
  a.add(3, 2, true, false);  // drafted all 3 it was allowed, passed 2
  CHECK(a.drafted_at == std::vector<double>{3, 1, 1});
  CHECK(a.stopped_at == std::vector<double>{0, 2});
  CHECK(a.stopped_passed_at == std::vector<double>{0, 1});
  CHECK(a.tried_at == std::vector<double>{3, 1, 1});
  CHECK(a.passed_at == std::vector<double>{2, 1, 0});
  // Its own counts with 8 pseudo-counts at the others' rate (none: 1). Drafting a second token:
  // 1 of 3 chains that had a first, 1 of 2 whose first passed.
  const ChainPrice price = chain_price(a, a, 3, 8);
  CHECK(price.reaches[1] == 1);
  CHECK(price.reaches[2] == Approx(9.0 / 11));
  CHECK(price.reaches[3] == Approx(9.0 / 11));
  const double alpha = (3 + 8 * 0.5) / (5 + 8.0);  // 3 accepted of 5 trials
  const double p1 = (2 + 8 * alpha) / (3 + 8), p2 = (1 + 8 * alpha) / (1 + 8);
  CHECK(price.tokens[1] == Approx(1 + p1));
  CHECK(price.tokens[2] == Approx(1 + p1 + p1 * (9.0 / 10) * p2));
  // Without stops, every allowed token is drafted.
  ChainAcceptance plain_chains;
  plain_chains.add(3, 1, true), plain_chains.add(3, 3, true);
  for (double r : chain_price(plain_chains, plain_chains, 3, 8).reaches) CHECK(r == 1);
  // Chains with a confidence stop that has not fired yet: past depth 1 each token is drafted
  // with the chain estimate's chance, not priced at full length (which kept a batch-1 run plain).
  const ChainPrice unseen = chain_price(plain_chains, plain_chains, 3, 8, true);
  const double chain_alpha = chain_estimate(plain_chains, plain_chains, 8);
  CHECK(unseen.reaches[1] == 1);
  CHECK(unseen.reaches[2] == Approx((2 + 8 * chain_alpha) / (2 + 8)));  // own: 2 drafted a second, none stopped
  CHECK(unseen.reaches[3] == Approx(unseen.reaches[2] * (2 + 8 * chain_alpha) / (2 + 8)));

  DraftLengthChooser chooser;
  for (int twice = 0; twice < 2; ++twice) {
    for (int rows = 1; rows <= 6; ++rows) chooser.target_forward(rows, 1e-3 + 5e-5 * (rows - 1));
    chooser.draft_round(1, 3e-4), chooser.draft_round(2, 3.5e-4);
  }
  LoadSequence s{{1, 1.5, 1.6, 1.65, 1.68}, 0, 40};
  // Every allowed token drafted: γ = 1 pays (1.5 tokens in 1.35 ms against 1 in 1), longer
  // chains do not; with a confidence stop only the longest is weighed, and it loses (1.68 in 2.4 ms).
  CHECK(chooser.choose(0, 0, std::span(&s, 1), 4).gamma == 1);
  s.confidence_stop = true;
  CHECK(chooser.choose(0, 0, std::span(&s, 1), 4).gamma == 0);
  // Chains that mostly stop after their first token: 2.25 rows expected, rounds 2-4 run one
  // step in 5, 25 and 100. γ = 4 makes 1.68 tokens in 1.4375 ms, and the stop is a drafted
  // token's 0.05 ms row and 0.3 ms round in tokens at that rate.
  s.reaches = {1, 1, 0.2, 0.04, 0.01};
  const LoadChoice stopped = chooser.choose(0, 0, std::span(&s, 1), 4);
  CHECK(stopped.gamma == 4);
  CHECK(stopped.stop_below == Approx(0.35e-3 * 1.68 / 1.4375e-3));
  CHECK(stopped.siblings == 0);  // its drafter proposes none

  // A sibling of the first token (DraftBound::siblings) adds a target row where the chain stops
  // short of 4 (0.99 of steps) and no draft round: at 0.2 tokens a 0.05 ms row it pays (1.88
  // tokens in 1.487 ms against 1.68 in 1.4375), at 0.03 it does not.
  s.sibling_tokens = 0.2;
  const LoadChoice sibling = chooser.choose(0, 0, std::span(&s, 1), 4);
  CHECK(sibling.gamma == 4);
  CHECK(sibling.siblings == 1);
  CHECK(sibling.stop_below == Approx(0.35e-3 * (1.68 + 0.99 * 0.2) / (1.4375e-3 + 0.99 * 0.05e-3)));
  s.sibling_tokens = 0.03;
  CHECK(chooser.choose(0, 0, std::span(&s, 1), 4).siblings == 0);
  // Rows at 0.5 ms: not even at 0.2 tokens a row.
  DraftLengthChooser dear;
  for (int twice = 0; twice < 2; ++twice) {
    for (int rows = 1; rows <= 6; ++rows) dear.target_forward(rows, 1e-3 + 5e-4 * (rows - 1));
    dear.draft_round(1, 3e-4), dear.draft_round(2, 3.5e-4);
  }
  s.sibling_tokens = 0.2;
  CHECK(dear.choose(0, 0, std::span(&s, 1), 4).siblings == 0);

  // Sibling evidence: rows proposed and those accepted, own with 8 pseudo-rows at the others'
  // (passed + 1) / (rows + 2).
  ChainAcceptance own, others;
  own.add_siblings(1, true), own.add_siblings(1, false), own.add_siblings(2, false);
  CHECK(own.sibling_rows == 4);
  CHECK(own.sibling_passed == 1);
  CHECK(sibling_rate_among(own, others, 8) == Approx((1 + 8 * 0.5) / (4 + 8)));
  others.add_siblings(1, true), others.add_siblings(7, true);
  CHECK(sibling_rate_among(own, others, 8) == Approx((1 + 8 * (3.0 / 10)) / (4 + 8)));
  ChainAcceptance pool = own;
  pool.add_siblings(1, true), pool.add_siblings(7, true);
  CHECK(pool.without(own).sibling_rows == 8);
  CHECK(pool.without(own).sibling_passed == 2);
}

// A closed batch (nothing waits to take a finished sequence's place) is done when its slowest
// sequence is. Batch 8, steps of 1 ms + 50 us a row, draft rounds of 10 us, 40 tokens left
// each, chains at α = 0.8: open, drafting pays; closed, it pays only while every sequence
// gains — one whose n-gram lookups match one step in ten gains 8% a step, so the batch's last
// steps run for it alone and drafting only adds rows to the others' (γ = 1: 37 steps of 1.81
// ms against 40 of 1.4).
TEST_CASE("the load policy weighs a closed batch by its slowest sequence", "[runtime][scheduler]") {
  DraftLengthChooser chooser;
  for (int twice = 0; twice < 2; ++twice) {
    for (int rows = 8; rows <= 40; rows += 8) chooser.target_forward(rows, 1e-3 + 5e-5 * rows);
    chooser.draft_round(8, 1e-5);
  }
  std::vector<double> tokens;
  for (int g = 0; g <= 4; ++g) tokens.push_back(expected_chain_tokens(0.8, g));
  std::vector<LoadSequence> load(8, LoadSequence{tokens, 0, 40});
  CHECK(chooser.choose(0, 0, load, 4, false).gamma > 0);
  CHECK(chooser.choose(0, 0, load, 4, true).gamma > 0);  // every sequence gains
  load[3].proposal_rate = 0.1;
  CHECK(chooser.choose(0, 0, load, 4, false).gamma > 0);
  CHECK(chooser.choose(0, 0, load, 4, true).gamma == 0);
  // The slow sequence has no n-gram match this step (depth_limit 0: a plain step): it still
  // sets the closed batch's end, and its chain over the steps to come is not bounded by
  // this step's lookup. Nothing can draft: plain.
  load[3].depth_limit = 0;
  CHECK(chooser.choose(0, 0, load, 4, false).gamma > 0);
  CHECK(chooser.choose(0, 0, load, 4, true).gamma == 0);
  load[3].proposal_rate = 1;  // it gains as the others do once it matches
  CHECK(chooser.choose(0, 0, load, 4, true).gamma > 0);
  for (LoadSequence& s : load) s.depth_limit = 0;
  CHECK(chooser.choose(0, 0, load, 4, false).gamma == 0);
  // A proposal rate: own lookups with 8 pseudo-lookups at the others' (proposals + 1) /
  // (lookups + 1); 1 before any lookup failed (a model drafter always proposes).
  ChainAcceptance own, pool;
  CHECK(proposal_rate(own, pool, 8) == 1);
  for (int i = 0; i < 9; ++i) pool.add_lookup(i < 2);
  CHECK(proposal_rate(own, pool, 8) == Approx(0.3));
  for (int i = 0; i < 4; ++i) own.add_lookup(true), pool.add_lookup(true);
  CHECK(proposal_rate(own, pool, 8) == Approx((4 + 8 * 0.3) / 12));
}

// Once it has drafted and stopped, the policy drafts every kPlainEvery-th plain step where a
// step would pay with every drafted token accepted: acceptance measured on a few steps (an
// n-gram chain's first rejections) is no verdict for good.
TEST_CASE("the load policy explores after it stops drafting", "[runtime][scheduler]") {
  DraftLengthChooser chooser;
  for (int rows : {1, 2, 3, 5}) chooser.target_forward(rows, 1e-3 + 5e-5 * (rows - 1));
  chooser.draft_round(1, 1e-5);
  const std::vector<double> hopeless(1, 0.04);
  int drafted = 0;
  for (int i = 0; i < 4 * DraftLengthChooser::kPlainEvery; ++i) drafted += chooser.choose(0, 0, hopeless, 4) > 0;
  CHECK(drafted == 4);
  // Compute-bound rows: a γ = 1 step at batch 32 costs twice a plain one; no exploration.
  DraftLengthChooser busy;
  for (int rows : {32, 64, 96}) busy.target_forward(rows, 1e-3 * (1 + rows));
  busy.draft_round(32, 1e-4);
  const std::vector<double> batch32(32, 0.04);
  for (int i = 0; i < 4 * DraftLengthChooser::kPlainEvery; ++i) CHECK(busy.choose(0, 0, batch32, 4) == 0);
}

// A load-policy request's draft model sees nothing until the policy first drafts for it, and
// its first token comes from the prompt's logits. One new token: the prefill alone, so no
// draft forward runs and no draft block is ever taken (the prompt's draft prefill at
// admission is gone); the token is plain greedy's.
TEST_CASE("a load-policy request the policy never drafts for runs no draft forward and decodes as plain",
          "[runtime][scheduler]") {
  const auto prompts = reference_prompts();
  for (const DraftMethod method : {DraftMethod::kModel, DraftMethod::kNgram}) {
    GenerateOptions o;
    o.model_dir = test::model_dir("target-16m");
    o.prompt_ids.assign(prompts[0].begin(), prompts[0].begin() + 12);
    o.max_new_tokens = 1;
    o.threads = 1;
    o.draft.method = method;
    if (method == DraftMethod::kModel) o.draft.model_dir = test::model_dir("draft-1m");
    o.gamma_policy = GammaPolicy::kLoad;
    GenerateOptions plain = o;
    plain.draft = {};
    plain.gamma_policy = GammaPolicy::kFixed;
    Scheduler scheduler(store(), o, single_request_limits(o));
    const int r = scheduler.submit(o);
    while (!scheduler.idle()) {
      scheduler.step();
      CHECK(scheduler.draft_blocks_in_use() == 0);
    }
    CHECK(scheduler.outcome(r).draft_forwards == 0);
    CHECK(scheduler.stats().steps == 1);  // the prefill, no verify step
    CHECK(scheduler.outcome(r).samples == alone(plain, 0));
  }
}

}  // namespace specula
