// Statistical losslessness of verify_stochastic: speculative sampling on a toy second-order
// Markov target / draft over 4 tokens must emit exactly the target's distribution, for a
// chain and for trees in every SiblingDraw mode, and the same test must catch
// deliberately broken verifiers.
//
// Each experiment draws N samples: a prompt (one of four, whose next-token rows have the
// four shapes of make_toy_models), then 3 tokens by repeated speculative steps (so the
// second step's tree hangs off the first step's output). Two chi-square tests per run: the
// first token (16 cells) and the first three tokens (256 cells), both jointly with the
// prompt; significance alpha = 1e-3 each, so a correct verifier fails a given seed with
// probability ~2e-3; seeds are fixed, so the outcome is reproducible. Cells of target
// probability 0 must stay empty (exactly). A broken variant counts as detected when the
// three-token test rejects. Power: a broken verifier shifts the cells to b, and the statistic
// becomes non-central chi-square with lambda = N * sum (b - e)^2 / e; b was measured with
// 4e6 samples of each broken variant (same pooling as the test). The lambdas at N = 20000
// are noted at each section (first token, df 14, critical value 36.1; three tokens,
// df 132, critical value 188.0). The smallest three-token lambda, 3235, puts the
// statistic's mean 27 standard deviations above the critical value: by the normal
// approximation a miss has probability < 1e-100; Chebyshev's bound alone gives power > 0.998.
#include <catch2/catch.hpp>

#include "test_verify_support.h"

namespace specula {
namespace {

using test::as_if;
using test::Drafter;
using test::Lossless;
using test::resample_from_target;
using test::StochasticVerifier;
using test::unnormalised_residual;

constexpr double kAlpha = 1e-3;
constexpr int kTokens = 3;
constexpr long kSamples = 20000;

const std::vector<std::vector<int>>& prompts() {
  // Last two tokens (a, b) with (a + 3b) % 4 = 0, 1, 2, 3: one prompt per row shape.
  static const std::vector<std::vector<int>> p{{3, 3}, {2, 1}, {0, 2}, {0, 1}};
  return p;
}

const test::ToyModels& models() {
  static const test::ToyModels m = test::make_toy_models(4, 2024);
  return m;
}

Drafter static_tree(std::vector<int> branching, std::vector<SiblingDraw> modes) {
  return [=](std::span<const int> text, Philox& rng) {
    return test::draft_static_tree(models(), branching, modes, text[text.size() - 2], text.back(), rng);
  };
}

Lossless run(const Drafter& drafter, const StochasticVerifier& verifier, uint64_t seed) {
  return test::lossless_experiment(models(), prompts(), kTokens, kSamples, drafter, verifier, seed);
}

void require_lossless(const Lossless& r) {
  INFO("first token: X2 = " << r.first.statistic << ", df = " << r.first.df << ", p = " << r.first.p_value);
  INFO("three tokens: X2 = " << r.joint.statistic << ", df = " << r.joint.df << ", p = " << r.joint.p_value);
  CHECK(r.first.impossible == 0);
  CHECK(r.joint.impossible == 0);
  CHECK(r.first.p_value > kAlpha);
  CHECK(r.joint.p_value > kAlpha);
}

void require_detected(const Lossless& r) {
  INFO("three tokens: X2 = " << r.joint.statistic << ", df = " << r.joint.df << ", p = " << r.joint.p_value
                             << ", impossible = " << r.joint.impossible);
  CHECK((r.joint.p_value < kAlpha || r.joint.impossible > 0));
}

const StochasticVerifier kCorrect = verify_stochastic;

}  // namespace

TEST_CASE("stochastic chain verification emits the target distribution", "[verify]") {
  const Drafter chain = static_tree({1, 1, 1}, {SiblingDraw::kSampled, SiblingDraw::kSampled, SiblingDraw::kSampled});
  SECTION("correct") { require_lossless(run(chain, kCorrect, 11)); }
  // lambda 2294 / 5711
  SECTION("broken: correction drawn from p") { require_detected(run(chain, resample_from_target, 12)); }
  // lambda 2326 / 5775
  SECTION("broken: residual not renormalised") { require_detected(run(chain, unnormalised_residual, 13)); }
}

TEST_CASE("i.i.d. tree verification (multi-step speculative sampling) emits the target distribution", "[verify]") {
  const Drafter tree = static_tree({3, 2, 1}, {SiblingDraw::kSampled, SiblingDraw::kSampled, SiblingDraw::kSampled});
  SECTION("correct") { require_lossless(run(tree, kCorrect, 21)); }
  // lambda 1996 / 5237
  SECTION("broken: correction drawn from p") { require_detected(run(tree, resample_from_target, 22)); }
  // lambda 640 / 23015
  SECTION("broken: verified as drawn without replacement") {
    require_detected(run(tree, as_if(SiblingDraw::kWithoutReplacement), 23));
  }
}

TEST_CASE("without-replacement tree verification emits the target distribution", "[verify]") {
  const std::vector<SiblingDraw> modes(3, SiblingDraw::kWithoutReplacement);
  const Drafter tree = static_tree({3, 2, 1}, modes);
  SECTION("correct") { require_lossless(run(tree, kCorrect, 31)); }
  // lambda 2114 / 3235
  SECTION("broken: verified as i.i.d. (q not updated)") {
    require_detected(run(tree, as_if(SiblingDraw::kSampled), 32));
  }
}

TEST_CASE("top-k tree verification (point-mass proposals) emits the target distribution", "[verify]") {
  const Drafter tree = static_tree({2, 2, 1}, {SiblingDraw::kTopK, SiblingDraw::kTopK, SiblingDraw::kTopK});
  SECTION("correct") { require_lossless(run(tree, kCorrect, 41)); }
  // lambda 10042 / 66945
  SECTION("broken: verified as i.i.d. draws from q") { require_detected(run(tree, as_if(SiblingDraw::kSampled), 42)); }
  // lambda 2808 / 10257
  SECTION("broken: correction drawn from p") { require_detected(run(tree, resample_from_target, 43)); }
}

TEST_CASE("a tree mixing draw modes by depth emits the target distribution", "[verify]") {
  const Drafter tree =
      static_tree({2, 2, 2}, {SiblingDraw::kTopK, SiblingDraw::kWithoutReplacement, SiblingDraw::kSampled});
  SECTION("correct") { require_lossless(run(tree, kCorrect, 51)); }
}

}  // namespace specula
