// Log-probabilities (sampling/token_logprob.h, --logprobs): token_logprob against an
// independent log-softmax in long double, with ties, -inf logits and the processed source's
// support; through generate(), speculative decoding reports the very bits plain decoding does
// for the same tokens (greedy: every drafter; sampled: a forward over the emitted tokens
// recomputes them), the options are refused where they do not apply, and output.logprobs puts
// them in every results line of an experiment.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "runtime/generate.h"
#include "sampling/sampler.h"
#include "sampling/token_logprob.h"
#include "tests/test_engine_support.h"
#include "tests/test_experiments_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

ModelStore& store() {
  static ModelStore models;
  return models;
}

// log softmax(row)[v] in long double, summed in token order.
long double reference_logprob(const std::vector<float>& row, int v) {
  long double max = -std::numeric_limits<long double>::infinity();
  for (float x : row) max = std::max<long double>(max, x);
  long double sum = 0;
  for (float x : row) sum += std::exp(static_cast<long double>(x) - max);
  return static_cast<long double>(row[static_cast<std::size_t>(v)]) - max - std::log(sum);
}

GenerateOptions options_for(const std::vector<int>& prompt) {
  GenerateOptions o;
  o.model_dir = test::model_dir("target-16m");
  o.prompt_ids = prompt;
  o.max_new_tokens = 24;  // n-grams need this many tokens to find a match in every prompt
  o.threads = 1;
  o.logprobs = 5;
  return o;
}

DraftOptions model_chain(int gamma) {
  DraftOptions d;
  d.method = DraftMethod::kModel;
  d.model_dir = test::model_dir("draft-1m");
  d.gamma = gamma;
  return d;
}

}  // namespace

TEST_CASE("token_logprob: the log-softmax and its most probable tokens, ties by lower id", "[sampling]") {
  Philox rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 1 + static_cast<int>(rng.uniform() * 300);
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    for (float& x : logits) x = static_cast<float>(std::round(rng.uniform() * 8) - 4);  // many ties
    if (vocab > 2) logits[1] = -std::numeric_limits<float>::infinity();
    const int token = static_cast<int>(rng.uniform() * vocab);
    const int top_n = static_cast<int>(rng.uniform() * (kMaxLogprobs + 1));
    const TokenLogprob t = token_logprob(LogprobSource::kRaw, logits, token, top_n);
    INFO("trial " << trial << ", vocab " << vocab);
    CHECK(t.token == token);
    if (std::isinf(logits[static_cast<std::size_t>(token)])) {
      CHECK(t.logprob == -std::numeric_limits<double>::infinity());
    } else {
      CHECK(std::abs(t.logprob - static_cast<double>(reference_logprob(logits, token))) < 1e-12);
    }
    REQUIRE(static_cast<int>(t.top.size()) == std::min(top_n, vocab));
    for (std::size_t i = 0; i < t.top.size(); ++i) {
      const auto [v, logprob] = t.top[i];
      if (!std::isinf(logits[static_cast<std::size_t>(v)]))
        CHECK(std::abs(logprob - static_cast<double>(reference_logprob(logits, v))) < 1e-12);
      // No token outside the list beats it; ties go to the lower id.
      bool beaten = false;
      for (int w = 0; w < vocab; ++w) {
        const bool listed = std::any_of(t.top.begin(), t.top.end(), [&](const auto& e) { return e.first == w; });
        const float x = logits[static_cast<std::size_t>(w)], y = logits[static_cast<std::size_t>(v)];
        beaten |= !listed && (x > y || (x == y && w < v));
      }
      CHECK_FALSE(beaten);
      if (i > 0) CHECK(logprob <= t.top[i - 1].second);
    }
  }
  // Processed: log p, the alternatives only inside the kept set.
  const std::vector<float> probs = {0.5f, 0.0f, 0.25f, 0.25f};
  const TokenLogprob p = token_logprob(LogprobSource::kProcessed, probs, 1, 4);
  CHECK(p.logprob == -std::numeric_limits<double>::infinity());
  REQUIRE(p.top.size() == 3);
  CHECK(p.top[0] == std::pair<int, double>{0, std::log(0.5)});
  CHECK(p.top[1].first == 2);  // the tie with 3 goes to the lower id
  CHECK(p.top[2].first == 3);
  CHECK_THROWS_WITH(token_logprob(LogprobSource::kRaw, probs, 4, 1), Catch::Contains("token 4 outside"));
  CHECK_THROWS_WITH(token_logprob(LogprobSource::kRaw, probs, 0, kMaxLogprobs + 1), Catch::Contains("at most 20"));
}

TEST_CASE("logprobs: greedy speculative decoding reports plain decoding's bits for every drafter",
          "[runtime][speculative][logprobs]") {
  const std::vector<int> prompt = store().model(test::model_dir("target-16m")).tokenizer().encode("int main(void) {", true);
  DraftOptions tree = model_chain(3);
  tree.tree = {2, 2};
  DraftOptions dynamic = model_chain(3);
  dynamic.tree_budget = 6;
  DraftOptions ngram;
  ngram.method = DraftMethod::kNgram;
  ngram.gamma = 3;
  for (const LogprobSource source : {LogprobSource::kRaw, LogprobSource::kProcessed}) {
    GenerateOptions plain = options_for(prompt);
    plain.logprobs_source = source;
    const nlohmann::json expected = generate(store(), plain);
    REQUIRE(expected["logprobs"]["content"].size() == expected["ids"].size());
    CHECK(expected["logprobs"]["source"] == name_of(source));
    for (const DraftOptions& d : {model_chain(4), tree, dynamic, ngram}) {
      GenerateOptions spec = plain;
      spec.draft = d;
      const nlohmann::json result = generate(store(), spec);
      INFO(name_of(source) << ", " << name_of(d.method) << " tree " << d.tree.size() << " budget " << d.tree_budget);
      CHECK(result["ids"] == expected["ids"]);
      CHECK(result["logprobs"] == expected["logprobs"]);  // doubles compared exactly
      CHECK(result["stats"]["accepted"].get<long>() > 0);
    }
  }
}

TEST_CASE("logprobs: sampled speculative decoding reports the rows a plain forward over its tokens gives",
          "[runtime][speculative][logprobs]") {
  const Backend& target = store().get(test::model_dir("target-16m"));
  const std::vector<int> prompt = store().model(test::model_dir("target-16m")).tokenizer().encode("The kernel", true);
  GenerateOptions o = options_for(prompt);
  o.sampling = SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f);
  o.draft = model_chain(3);
  o.num_samples = 2;
  o.seed = 3;
  const nlohmann::json result = generate(store(), o);
  REQUIRE(result["logprobs"]["samples"].size() == 2);
  for (std::size_t s = 0; s < 2; ++s) {
    const std::vector<int> ids = result["samples"][s].get<std::vector<int>>();
    const nlohmann::json& content = result["logprobs"]["samples"][s];
    REQUIRE(content.size() == ids.size());
    // One causal forward over prompt + emitted tokens: row prompt - 1 + k gave token k.
    std::vector<int> tokens = prompt;
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    std::vector<int> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    test::Engine e(target, 16, 64);
    const int vocab = target.config().vocab_size;
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(vocab));
    e.forward(e.cache.create(), {tokens, positions, {}, true}, logits);
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const auto row = std::span<const float>(logits).subspan((prompt.size() - 1 + k) * vocab, vocab);
      const TokenLogprob want = token_logprob(LogprobSource::kRaw, row, ids[k], 5);
      INFO("sample " << s << ", token " << k);
      CHECK(content[k]["logprob"].get<double>() == want.logprob);
      CHECK(content[k]["top"][0]["token"] == want.top[0].first);
      CHECK(content[k]["top"][0]["logprob"].get<double>() == want.top[0].second);
    }
  }
}

TEST_CASE("logprobs: the token sink gets each token with the result's logprobs and nullptr without them",
          "[runtime][logprobs]") {
  const std::vector<int> prompt = store().model(test::model_dir("target-16m")).tokenizer().encode("The kernel", true);
  GenerateOptions sampled = options_for(prompt);
  sampled.sampling = SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f);
  sampled.num_samples = 2;
  sampled.seed = 5;
  GenerateOptions speculative = sampled;
  speculative.draft = model_chain(3);
  GenerateOptions none = options_for(prompt);
  none.logprobs.reset();
  for (const GenerateOptions& o : {options_for(prompt), sampled, speculative, none}) {
    std::vector<std::vector<int>> ids(static_cast<std::size_t>(o.num_samples));
    nlohmann::json streamed = nlohmann::json::array();
    for (int s = 0; s < o.num_samples; ++s) streamed.push_back(nlohmann::json::array());
    int missing = 0;
    const nlohmann::json result = generate(store(), o, [&](int sample, int token, const TokenLogprob* logprob) {
      ids[static_cast<std::size_t>(sample)].push_back(token);
      if (!logprob) {
        ++missing;
        return;
      }
      CHECK(logprob->token == token);
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [t, value] : logprob->top) top.push_back({{"token", t}, {"logprob", value}});
      streamed[static_cast<std::size_t>(sample)].push_back(
          {{"token", logprob->token}, {"logprob", logprob->logprob}, {"top", std::move(top)}});
    });
    INFO("samples " << o.num_samples << ", draft " << name_of(o.draft.method) << ", logprobs " << o.logprobs.has_value());
    const bool several = o.num_samples > 1;
    for (int s = 0; s < o.num_samples; ++s) {
      const nlohmann::json& want_ids = several ? result["samples"][s] : result["ids"];
      CHECK(ids[static_cast<std::size_t>(s)] == want_ids.get<std::vector<int>>());
      if (o.logprobs)
        CHECK(streamed[static_cast<std::size_t>(s)] ==
              (several ? result["logprobs"]["samples"][s] : result["logprobs"]["content"]));  // doubles compared exactly
    }
    CHECK(missing == (o.logprobs ? 0 : static_cast<int>(ids[0].size())));
  }
}

TEST_CASE("logprobs: refused with beam search and above the maximum", "[runtime][logprobs]") {
  GenerateOptions o = options_for({1, 2, 3});
  o.logprobs = kMaxLogprobs + 1;
  CHECK_THROWS_WITH(validate_options(o, cli_option_names()), Catch::Contains("--logprobs must be in [0, 20], got 21"));
  o.logprobs = 2;
  o.sampling.strategy = Strategy::kBeam;
  CHECK_THROWS_WITH(validate_options(o, cli_option_names()), Catch::Contains("--logprobs does not apply to --sampler beam"));
}

}  // namespace specula

namespace specula {

TEST_CASE("logprobs: output.logprobs puts them in every results line of a run, one request or a batch",
          "[experiments][logprobs]") {
  test::ScratchDir dir;
  const std::string config = (dir.path() / "logprobs.toml").string();
  std::ofstream(config) << "[target]\npath = \"" << test::model_dir("target-16m")
                        << "\"\n[sampling]\nstrategy = \"sample\"\n[run]\nmax_new_tokens = 3\nrepetitions = 1\n"
                           "prompts = [{ id = \"a\", domain = \"d\", prompt = \"def\" }, { id = \"b\", domain = \"d\", prompt = \"int\" }]\n"
                           "[output]\ndirectory = \"out\"\nformats = [\"csv\"]\nlogprobs = 2\nlogprobs_source = \"processed\"\n"
                           "[sweep]\n\"run.batch_size\" = [0, 2]\n";
  const test::Outcome ran = test::run_specula("run --quiet '" + config + "'");
  INFO("run stderr: " << ran.err);
  REQUIRE(ran.status == 0);
  std::ifstream lines(dir.path() / "out" / "results.jsonl");
  int objects = 0;
  for (std::string text; std::getline(lines, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    CHECK(line.at("settings").at("output") == nlohmann::json::parse(R"({"logprobs": 2, "logprobs_source": "processed"})"));
    for (const nlohmann::json& r : line.contains("requests") ? line.at("requests") : nlohmann::json::array({line})) {
      const nlohmann::json& l = r.at("logprobs");
      CHECK(l.at("source") == "processed");
      CHECK(l.at("content").size() == r.at("ids").size());
      CHECK(l.at("content").at(0).at("top").size() == 2);
      ++objects;
    }
  }
  CHECK(objects == 4);  // two single-request lines, one batched line of two requests

  std::ofstream(config) << "[target]\npath = \"" << test::model_dir("target-16m")
                        << "\"\n[run]\nprompts = [\"x\"]\n[output]\nlogprobs_source = \"raw\"\n";
  CHECK_THAT(test::run_specula("run --dry-run '" + config + "'").err,
             Catch::Contains("output.logprobs_source does not apply: it needs output.logprobs"));
  std::ofstream(config) << "[target]\npath = \"" << test::model_dir("target-16m")
                        << "\"\n[run]\nprompts = [\"x\"]\n[output]\nlogprobs = 21\n";
  CHECK_THAT(test::run_specula("run --dry-run '" + config + "'").err,
             Catch::Contains("output.logprobs must be an integer in [0, 20], got 21"));
}

}  // namespace specula
