// NgramProposer: hand-made contexts, the incremental index against a brute-force scan,
// the drafter's proposal limit, configuration errors, and losslessness of its point-mass proposals under stochastic
// verification (the chi-square harness of test_verify_lossless.cpp).
#include <catch2/catch.hpp>

#include "draft/ngram_drafter.h"
#include "draft/ngram_proposer.h"
#include "base/error.h"
#include "test_verify_support.h"

namespace specula {
namespace {

using Ints = std::vector<int>;

Ints propose(NgramConfig config, const Ints& context) {
  NgramProposer proposer(config);
  proposer.append(context);
  const TokenTree tree = proposer.propose();
  tree.validate(1 << 20);
  CHECK(tree.draw == std::vector<SiblingDraw>(tree.num_contexts(), SiblingDraw::kTopK));
  CHECK(tree.parent == TokenTree::chain(tree.tokens, SiblingDraw::kTopK).parent);
  return tree.tokens;
}

// The proposal by definition: scan n = n_max..n_min, the latest earlier end e < L - 1 whose
// n tokens equal the suffix; continue periodically past the end of the context.
Ints brute_force(NgramConfig config, const Ints& context) {
  const int length = static_cast<int>(context.size());
  for (int n = config.n_max; n >= config.n_min; --n) {
    for (int e = length - 2; e >= n - 1; --e) {
      if (!std::equal(context.begin() + (e - n + 1), context.begin() + (e + 1), context.end() - n)) continue;
      Ints seq = context;
      for (int k = 0; k < config.gamma; ++k) seq.push_back(seq[e + 1 + k]);
      return Ints(seq.begin() + length, seq.end());
    }
  }
  return {};
}

}  // namespace

TEST_CASE("n-gram proposer: longest suffix first, most recent match, periodic continuation", "[draft]") {
  // Suffix (1 2) occurred at 0..1: propose what followed, running into the suffix itself.
  CHECK(propose({1, 2, 4}, {1, 2, 3, 4, 1, 2}) == Ints{3, 4, 1, 2});
  CHECK(propose({1, 2, 6}, {1, 2, 3, 4, 1, 2}) == Ints{3, 4, 1, 2, 3, 4});
  // Most recent earlier occurrence of (1): at index 4, followed by 8 2.
  CHECK(propose({1, 1, 2}, {5, 1, 7, 9, 1, 8, 2, 1}) == Ints{8, 2});
  // The 2-gram (1 2) beats the more recent 1-gram (2).
  CHECK(propose({1, 2, 1}, {1, 2, 9, 3, 2, 8, 1, 2}) == Ints{9});
  CHECK(propose({1, 1, 1}, {1, 2, 9, 3, 2, 8, 1, 2}) == Ints{8});
  // Only a 1-gram matches, but n_min = 2: nothing.
  CHECK(propose({2, 3, 4}, {4, 5, 6, 7, 4}).empty());
  CHECK(propose({1, 3, 4}, {4, 5, 6, 7, 4}) == Ints{5, 6, 7, 4});
  // Too short or no repetition: nothing.
  CHECK(propose({1, 3, 4}, {}).empty());
  CHECK(propose({1, 3, 4}, {7}).empty());
  CHECK(propose({1, 3, 4}, {1, 2, 3}).empty());
  // A constant run: period 1.
  CHECK(propose({1, 3, 5}, {0, 6, 6}) == Ints{6, 6, 6, 6, 6});
}

TEST_CASE("n-gram proposer: the incremental index proposes what a full scan finds", "[draft]") {
  Philox rng(17);
  for (int trial = 0; trial < 40; ++trial) {
    const int vocab = 2 + trial % 5;
    NgramConfig config;
    config.n_min = 1 + trial % 2;
    config.n_max = config.n_min + trial % 3;
    config.gamma = 1 + trial % 6;
    NgramProposer proposer(config);
    Ints context;
    for (int step = 0; step < 60; ++step) {
      Ints chunk(1 + static_cast<int>(rng.uniform() * 3));
      for (int& t : chunk) t = static_cast<int>(rng.uniform() * vocab);
      proposer.append(chunk);
      context.insert(context.end(), chunk.begin(), chunk.end());
      INFO("trial " << trial << " step " << step);
      REQUIRE(proposer.propose().tokens == brute_force(config, context));
    }
    proposer.reset();
    CHECK(proposer.context().empty());
    CHECK(proposer.propose().size() == 0);
    proposer.append(context);
    CHECK(proposer.propose().tokens == brute_force(config, context));
  }
}

// The drafter's proposal limit is the size of the proposal it would start now (the scheduler
// prices a load-policy chain by it, and takes a plain step where it is 0), whatever context
// it has learnt so far.
TEST_CASE("n-gram drafter: the proposal limit is what a proposal started now holds", "[draft]") {
  NgramDrafter drafter({1, 3, 4});
  Philox rng(3);
  const Ints committed = {5, 1, 7, 9, 1, 8, 2, 1, 8};
  for (std::size_t length = 0; length <= committed.size(); ++length) {
    const std::span<const int> seen(committed.data(), length);
    const int limit = drafter.proposal_limit(seen);
    drafter.start(seen, {100}, rng);
    INFO("context length " << length);
    CHECK(limit == drafter.take_proposal().tree.size());
    CHECK(limit == static_cast<int>(brute_force({1, 3, 4}, Ints(seen.begin(), seen.end())).size()));
  }
}

TEST_CASE("n-gram proposer: configuration errors name the flag", "[draft]") {
  CHECK_THROWS_WITH(NgramProposer({0, 3, 4}), Catch::Contains("--ngram-min"));
  CHECK_THROWS_WITH(NgramProposer({3, 2, 4}), Catch::Contains("--ngram-max"));
  CHECK_THROWS_WITH(NgramProposer({1, 2, 0}), Catch::Contains("--gamma"));
}

TEST_CASE("n-gram point-mass proposals verified stochastically emit the target distribution", "[draft]") {
  // The toy target of test_verify_lossless.cpp; prompts that repeat themselves so that the
  // proposer matches, ending in the four row shapes. N = 20000, 3 tokens, alpha = 1e-3 per
  // chi-square test. Power against drawing the correction from p (so that the rejected
  // proposal can come back): lambda = 3487 (first token, df 14) and 10792 (three tokens,
  // df 132, critical value 188) at this N, measured with 4e6 samples: power > 0.999 by
  // Chebyshev's bound, a miss probability < 1e-100 by the normal approximation.
  const test::ToyModels m = test::make_toy_models(4, 2024);
  const std::vector<Ints> prompts = {{0, 1, 2, 3, 0, 1, 2, 3, 3, 3},
                                     {2, 1, 0, 3, 2, 1, 0, 2, 1},
                                     {0, 2, 3, 1, 0, 2, 3, 0, 2},
                                     {3, 0, 1, 3, 0, 1, 2, 0, 1}};
  const test::Drafter ngram = [](std::span<const int> text, Philox&) {
    NgramProposer proposer({1, 3, 3});
    proposer.append(text);
    return proposer.propose();
  };
  const test::Lossless ok = test::lossless_experiment(m, prompts, 3, 20000, ngram, verify_stochastic, 61);
  INFO("first: X2 = " << ok.first.statistic << " df " << ok.first.df << " p " << ok.first.p_value);
  INFO("joint: X2 = " << ok.joint.statistic << " df " << ok.joint.df << " p " << ok.joint.p_value);
  CHECK(ok.first.impossible + ok.joint.impossible == 0);
  CHECK(ok.first.p_value > 1e-3);
  CHECK(ok.joint.p_value > 1e-3);
  const test::Lossless broken = test::lossless_experiment(m, prompts, 3, 20000, ngram, test::resample_from_target, 62);
  INFO("broken joint: X2 = " << broken.joint.statistic << " p " << broken.joint.p_value);
  CHECK(broken.joint.p_value < 1e-3);
}

}  // namespace specula
