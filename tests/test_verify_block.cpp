// Block verification (verify/block_verifier.h): its exact output law, computed from the
// implementation's weights and residuals by enumerating every draft chain, equals the
// target's (and a planted token-level residual breaks it); its expected kept length over
// the drafts is at least token-level's; sampled through verify_block with the verifier's
// uniforms it passes the chi-square losslessness test of test_verify_lossless.cpp (and the
// planted bug fails it); with one-hot target rows it is greedy verification.
//
// The chi-square section is test_verify_lossless.cpp's experiment with 10^5 samples at alpha
// 1e-3, judged on the first three tokens jointly with the prompt (the first token alone cannot
// see the planted bug: keep_0 = 1, so its residual is token-level's). Its power against the
// planted bug is in docs/measurements.md ("Power of the block-verification test").
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "test_verify_support.h"
#include "verify/block_verifier.h"
#include "verify/verify_rule.h"

namespace specula {
namespace {

using test::ToyModels;

// One draft chain with its probability under the draft.
struct Draft {
  std::vector<int> tokens;
  double probability = 0;
};

// Every chain of `g` tokens after a text ending (a, b): drawn from q (kSampled), or the
// draft's most probable token at each context (kTopK, one chain of probability 1).
std::vector<Draft> drafts(const ToyModels& m, int a, int b, int g, SiblingDraw mode) {
  std::vector<Draft> out{{{}, 1.0}};
  for (int depth = 0; depth < g; ++depth) {
    std::vector<Draft> next;
    for (const Draft& d : out) {
      const int ta = d.tokens.size() >= 2 ? d.tokens[d.tokens.size() - 2] : d.tokens.empty() ? a : b;
      const int tb = d.tokens.empty() ? b : d.tokens.back();
      const auto q = m.q_row(ta, tb);
      if (mode == SiblingDraw::kTopK) {
        const int best = static_cast<int>(std::max_element(q.begin(), q.end()) - q.begin());
        next.push_back({d.tokens, 1.0});
        next.back().tokens.push_back(best);
        continue;
      }
      for (int x = 0; x < m.vocab; ++x) {
        if (q[x] <= 0.0f) continue;
        next.push_back({d.tokens, d.probability * q[x]});
        next.back().tokens.push_back(x);
      }
    }
    out = std::move(next);
  }
  return out;
}

// The residual a rule draws the last token from after keeping `tau` tokens.
using ResidualRule = std::function<Residual(const TokenTree&, std::span<const float> p, std::span<const float> q,
                                            int vocab, const BlockWeights&, int tau)>;

// Broken: after keeping tau < g tokens the token is drawn from token-level's residual,
// max(p - q, 0), instead of max(keep_tau p - q, 0).
Residual token_level_residual(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab,
                              const BlockWeights& w, int tau) {
  if (tau == chain.size()) return block_residual(chain, p, q, vocab, w, tau);
  BlockWeights unscaled = w;
  std::fill(unscaled.keep.begin(), unscaled.keep.end(), 1.0);
  return block_residual(chain, p, q, vocab, unscaled, tau);
}

// The law of the first g + 1 tokens after a text ending (a, b) under one block-verified step
// of a g-token chain, the tokens after the step's emission continuing from the target;
// index = the tokens as a base-vocab number, first most significant.
std::vector<double> block_step_law(const ToyModels& m, int a, int b, int g, SiblingDraw mode,
                                   const ResidualRule& residual_rule) {
  const int count = g + 1;
  std::vector<double> law(static_cast<std::size_t>(std::pow(m.vocab, count)), 0.0);
  for (const Draft& d : drafts(m, a, b, g, mode)) {
    const TokenTree chain = TokenTree::chain(d.tokens, mode);
    const test::StepRows rows = test::step_rows(m, chain, a, b);
    const BlockWeights w = block_weights(chain, rows.p, rows.q, m.vocab);
    double later_stop_none = 1.0;  // P(no i > tau stops)
    for (int tau = g; tau >= 0; --tau) {
      const double p_tau = w.stop[tau] * later_stop_none;
      later_stop_none *= 1.0 - w.stop[tau];
      if (p_tau <= 0.0) continue;
      const Residual r = residual_rule(chain, rows.p, rows.q, m.vocab, w, tau);
      for (int y = 0; y < m.vocab; ++y) {
        const double py = r.weight(y) / r.mass();
        if (py <= 0.0) continue;
        std::vector<int> emitted(d.tokens.begin(), d.tokens.begin() + tau);
        emitted.push_back(y);
        // Spread over the target's continuations of the emitted tokens.
        const int rest = count - static_cast<int>(emitted.size());
        const int ea = emitted.size() >= 2 ? emitted[emitted.size() - 2] : b, eb = emitted.back();
        const std::vector<double> tail = test::exact_sequence_probs(m, ea, eb, rest);
        std::size_t head = 0;
        for (int x : emitted) head = head * m.vocab + x;
        for (std::size_t t = 0; t < tail.size(); ++t)
          law[head * tail.size() + t] += d.probability * p_tau * py * tail[t];
      }
    }
  }
  return law;
}

double total_variation(std::span<const double> a, std::span<const double> b) {
  double tv = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) tv += std::abs(a[i] - b[i]);
  return tv / 2;
}

// The four row shapes of make_toy_models: (a + 3b) % 4 = 0, 1, 2, 3.
const std::vector<std::pair<int, int>> kTails = {{3, 3}, {2, 1}, {0, 2}, {0, 1}};

}  // namespace

TEST_CASE("block verification's exact output law is the target's", "[verify]") {
  const ResidualRule correct = block_residual;
  for (const uint64_t seed : {2024u, 7u, 99u}) {
    const ToyModels m = test::make_toy_models(4, seed);
    for (const SiblingDraw mode : {SiblingDraw::kSampled, SiblingDraw::kTopK}) {
      for (int g = 1; g <= 3; ++g) {
        for (const auto& [a, b] : kTails) {
          INFO("seed " << seed << ", mode " << static_cast<int>(mode) << ", g " << g << ", tail " << a << " " << b);
          const std::vector<double> target = test::exact_sequence_probs(m, a, b, g + 1);
          CHECK(total_variation(block_step_law(m, a, b, g, mode, correct), target) < 1e-6);
        }
      }
    }
  }
  // Longer chains over a 3-token vocabulary (3^g drafts each).
  const ToyModels small = test::make_toy_models(3, 5);
  for (int g = 4; g <= 6; ++g)
    for (const auto& [a, b] : kTails) {
      INFO("vocab 3, g " << g << ", tail " << a % 3 << " " << b % 3);
      const std::vector<double> target = test::exact_sequence_probs(small, a % 3, b % 3, g + 1);
      CHECK(total_variation(block_step_law(small, a % 3, b % 3, g, SiblingDraw::kSampled, correct), target) < 1e-6);
    }
  SECTION("a planted token-level residual breaks it") {
    const ToyModels m = test::make_toy_models(4, 2024);
    double worst = 0.0;
    for (const auto& [a, b] : kTails)
      worst = std::max(worst, total_variation(block_step_law(m, a, b, 3, SiblingDraw::kSampled, token_level_residual),
                                              test::exact_sequence_probs(m, a, b, 4)));
    CHECK(worst > 1e-2);
  }
}

TEST_CASE("block verification keeps at least token-level's expected length over the drafts", "[verify]") {
  // Expected kept tokens given a draft: token-level, sum_k prod_{i <= k} min(1, p/q) from the
  // rows; block, sum_k P(tau >= k) = sum_k (1 - prod_{i >= k} (1 - stop_i)) from block_weights.
  double largest_gain = 0.0;
  int cases = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const int vocab = 3 + static_cast<int>(seed % 3);
    const ToyModels m = test::make_toy_models(vocab, seed);
    for (int g = 1; g <= 4; ++g) {
      for (const auto& [a0, b0] : kTails) {
        const int a = a0 % vocab, b = b0 % vocab;
        double token_level = 0.0, block = 0.0;
        for (const Draft& d : drafts(m, a, b, g, SiblingDraw::kSampled)) {
          const TokenTree chain = TokenTree::chain(d.tokens, SiblingDraw::kSampled);
          const test::StepRows rows = test::step_rows(m, chain, a, b);
          double pass = 1.0;
          for (int i = 0; i < g; ++i) {
            const std::size_t at = static_cast<std::size_t>(i) * vocab + d.tokens[i];
            pass *= std::min(1.0, double(rows.p[at]) / rows.q[at]);
            token_level += d.probability * pass;
          }
          const BlockWeights w = block_weights(chain, rows.p, rows.q, vocab);
          double none_from = 1.0;  // P(no i >= k stops), k from g down
          for (int k = g; k >= 1; --k) {
            none_from *= 1.0 - w.stop[k];
            block += d.probability * (1.0 - none_from);
          }
        }
        INFO("seed " << seed << ", vocab " << vocab << ", g " << g << ": token-level " << token_level << ", block "
                     << block);
        CHECK(block >= token_level - 1e-6);  // float rows: sums off 1 by rounding
        if (g == 1) CHECK(block == Approx(token_level).margin(1e-6));  // one token: the rules coincide
        largest_gain = std::max(largest_gain, block - token_level);
        ++cases;
      }
    }
  }
  INFO(cases << " cases");
  CHECK(largest_gain > 1e-3);  // the rules differ where the theory says they can
}

TEST_CASE("block verification through its uniforms emits the target distribution", "[verify]") {
  const ToyModels m = test::make_toy_models(4, 2024);
  const std::vector<std::vector<int>> prompts{{3, 3}, {2, 1}, {0, 2}, {0, 1}};
  const test::Drafter chain = [&](std::span<const int> text, Philox& rng) {
    const std::vector<int> branching{1, 1, 1};
    const std::vector<SiblingDraw> modes(3, SiblingDraw::kSampled);
    return test::draft_static_tree(m, branching, modes, text[text.size() - 2], text.back(), rng);
  };
  constexpr double kAlpha = 1e-3;
  constexpr long kSamples = 100000;
  SECTION("correct") {
    const test::Lossless r = test::lossless_experiment(m, prompts, 3, kSamples, chain, verify_block, 61);
    INFO("first token: X2 = " << r.first.statistic << ", p = " << r.first.p_value);
    INFO("three tokens: X2 = " << r.joint.statistic << ", df = " << r.joint.df << ", p = " << r.joint.p_value);
    CHECK(r.first.impossible == 0);
    CHECK(r.joint.impossible == 0);
    CHECK(r.first.p_value > kAlpha);
    CHECK(r.joint.p_value > kAlpha);
  }
  SECTION("broken: token-level residual after a kept prefix") {
    const test::StochasticVerifier broken = [](const TokenTree& tree, std::span<const float> p,
                                               std::span<const float> q, int vocab, std::span<const double> u) {
      VerifyResult r = verify_block(tree, p, q, vocab, u);
      const int tau = static_cast<int>(r.accepted_nodes.size());
      const int token = token_level_residual(tree, p, q, vocab, block_weights(tree, p, q, vocab), tau)
                            .sample(u[static_cast<std::size_t>(tree.size() + tau)]);
      if (token >= 0) r.tokens.back() = token;
      return r;
    };
    const test::Lossless r = test::lossless_experiment(m, prompts, 3, kSamples, chain, broken, 62);
    INFO("three tokens: X2 = " << r.joint.statistic << ", df = " << r.joint.df << ", p = " << r.joint.p_value);
    CHECK((r.joint.p_value < kAlpha || r.joint.impossible > 0));
  }
}

TEST_CASE("block verification with one-hot target rows is greedy verification", "[verify]") {
  Philox rng(5);
  const int vocab = 6;
  for (int trial = 0; trial < 500; ++trial) {
    const int g = static_cast<int>(rng.uniform() * 6);
    std::vector<int> tokens, argmax;
    for (int i = 0; i < g; ++i) tokens.push_back(static_cast<int>(rng.uniform() * 3));  // often the argmax
    std::vector<float> p, q;
    for (int c = 0; c <= g; ++c) {
      argmax.push_back(static_cast<int>(rng.uniform() * 3));
      for (int x = 0; x < vocab; ++x) p.push_back(x == argmax.back() ? 1.0f : 0.0f);
      std::vector<double> w(vocab);
      double sum = 0;
      for (double& v : w) sum += v = rng.uniform();
      for (double v : w) q.push_back(static_cast<float>(v / sum));
    }
    const TokenTree chain = TokenTree::chain(tokens, trial % 2 ? SiblingDraw::kSampled : SiblingDraw::kTopK);
    const VerifyResult block = verify_block(chain, p, q, vocab, draw_verify_uniforms(chain, rng));
    const VerifyResult greedy = verify_greedy(chain, argmax);
    INFO("trial " << trial);
    CHECK(block.accepted_nodes == greedy.accepted_nodes);
    CHECK(block.tokens == greedy.tokens);
  }
}

TEST_CASE("verify rules: names, the trees they take, and refusals", "[verify]") {
  CHECK(parse_enum<VerifyRule>("block") == VerifyRule::kBlock);
  CHECK(parse_enum<VerifyRule>("token") == VerifyRule::kToken);
  CHECK_FALSE(parse_enum<VerifyRule>("blok").has_value());
  TokenTree tree(SiblingDraw::kTopK);
  tree.add_node(-1, 1);
  tree.add_node(-1, 2);  // a second child of the root: a branching tree
  CHECK(rule_takes(VerifyRule::kToken, tree));
  CHECK_FALSE(rule_takes(VerifyRule::kBlock, tree));
  const std::vector<float> p(3 * 4, 0.25f);
  const std::vector<double> u(verify_uniform_count(tree), 0.5);
  CHECK_THROWS_WITH(verify_with(VerifyRule::kBlock, tree, p, {}, 4, u),
                    Catch::Contains("verify rule 'block' takes a chain"));
  CHECK_NOTHROW(verify_with(VerifyRule::kToken, tree, p, {}, 4, u));
  const TokenTree chain = TokenTree::chain(std::vector<int>{1, 2}, SiblingDraw::kSampled);
  CHECK_THROWS_WITH(verify_block(chain, p, {}, 4, u), Catch::Contains("no q was given"));
  CHECK_THROWS_WITH(verify_block(chain, std::span(p).first(8), {}, 4, u), Catch::Contains("p has 8 floats"));
}

}  // namespace specula
