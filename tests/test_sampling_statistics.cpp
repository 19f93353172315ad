// Statistical tests: draws follow Sampler::distribution (chi-square goodness of fit), the
// test has the power to see a planted 2% bias, and seeded draws are deterministic.
//
// Significance: each goodness-of-fit check rejects at alpha = 0.001 (the critical value is
// the chi-square 0.999 quantile, Wilson-Hilferty approximation: within 1% of the exact
// value for df >= 3, slightly above it).  The seeds are fixed, so a run is reproducible;
// alpha is the chance that a correct sampler would fail for a seed picked at random.
//
// Power: with N draws and a true distribution q != p, the statistic is approximately
// noncentral chi-square with df = K - 1 and lambda = N * sum_i (q_i - p_i)^2 / p_i.  The
// planted bias raises one token j from p_j to 1.02 p_j (a relative 2%) and scales the
// others down proportionally, so lambda = N * (0.02 p_j)^2 / (p_j (1 - p_j))
// = N * 0.0004 * p_j / (1 - p_j).  With p_j = 0.3 and N = 500,000: lambda = 85.7; the
// statistic has mean df + lambda = 94.7 and variance 2 (df + 2 lambda) = 361 (sd 19.0),
// against a critical value of 27.9 (df = 9): 3.5 sd below the mean, power >= 0.9997 by the
// normal approximation (the noncentral chi-square's left tail is lighter still).  An
// absolute bias of 2 points (lambda = N * 0.02^2 / (p_j (1 - p_j)) = 952) is certain to be
// caught.  Expected counts are >= N * 0.005 = 2500 per kept token, far above the usual 5.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "sampling/sampler.h"

using namespace specula;

namespace {

constexpr int kDraws = 500000;

// The chi-square quantile at 1 - 0.001 (Wilson-Hilferty).
double critical_value(int df) {
  const double z = 3.090232306167813;  // standard normal 0.999 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

// Pearson's statistic of `draws` against `p` over the tokens with p > 0; tokens with p = 0
// must never be drawn.  Returns {statistic, degrees of freedom}.
std::pair<double, int> chi_square(const std::vector<int>& draws, const std::vector<float>& p) {
  std::vector<double> counts(p.size(), 0.0);
  for (int token : draws) counts[token] += 1;
  double statistic = 0.0;
  int support = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0f) {
      REQUIRE(counts[i] == 0);
      continue;
    }
    const double expected = double(p[i]) * draws.size();
    statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++support;
  }
  return {statistic, support - 1};
}

std::vector<int> draw_many(const Sampler& sampler, const std::vector<float>& probs, Philox& rng) {
  std::vector<int> draws(kDraws);
  for (int& token : draws) token = sampler.draw(probs, rng);
  return draws;
}

// Ten tokens; token 0 has probability 0.3.
const std::vector<float> kProbs = {0.30f, 0.20f, 0.15f, 0.10f, 0.08f, 0.07f, 0.05f, 0.03f, 0.015f, 0.005f};

std::vector<float> logits_of(const std::vector<float>& probs) {
  std::vector<float> logits;
  for (float p : probs) logits.push_back(std::log(p));
  return logits;
}

}  // namespace

TEST_CASE("draws follow the sampler's distribution (chi-square, alpha = 0.001)", "[sampling]") {
  const std::vector<float> logits = logits_of(kProbs);
  const SamplingOptions settings[] = {
      SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f),  SamplingOptions::sample(0.7f, 6, 1.0f, 0.0f),  SamplingOptions::sample(1.0f, 0, 0.8f, 0.0f),
      SamplingOptions::sample(1.3f, 0, 1.0f, 0.1f), SamplingOptions::sample(0.9f, 8, 0.95f, 0.05f),
  };
  uint64_t stream = 0;
  for (const SamplingOptions& o : settings) {
    const auto sampler = make_sampler(o);
    std::vector<float> probs(logits.size());
    sampler->distribution(logits, probs);
    Philox rng(99, stream++);
    const auto [statistic, df] = chi_square(draw_many(*sampler, probs, rng), probs);
    INFO("T " << o.temperature << " top-k " << o.top_k << " top-p " << o.top_p << " min-p " << o.min_p << " df "
              << df);
    REQUIRE(df >= 3);
    CHECK(statistic < critical_value(df));
  }
}

TEST_CASE("one draw from each of many streams follows the distribution", "[sampling]") {
  // The per-sequence use: stream i of one seed gives sequence i its first token.
  const auto sampler = make_sampler(SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f));
  std::vector<int> draws(kDraws);
  for (int i = 0; i < kDraws; ++i) {
    Philox rng(7, uint64_t(i));
    draws[i] = sampler->draw(kProbs, rng);
  }
  const auto [statistic, df] = chi_square(draws, kProbs);
  CHECK(df == 9);
  CHECK(statistic < critical_value(df));
}

TEST_CASE("the chi-square test detects a planted 2% bias", "[sampling]") {
  // Token 0 raised from 0.3 to 0.306, the rest scaled by 0.694 / 0.7.
  std::vector<float> biased = kProbs;
  biased[0] = 0.306f;
  for (size_t i = 1; i < biased.size(); ++i) biased[i] = float(kProbs[i] * (0.694 / 0.7));
  const auto sampler = make_sampler(SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f));
  Philox rng(99, 1000);
  const auto [statistic, df] = chi_square(draw_many(*sampler, biased, rng), kProbs);
  CHECK(df == 9);
  CHECK(critical_value(9) == Approx(27.877).epsilon(0.01));
  CHECK(statistic > critical_value(df));
}

TEST_CASE("seeded draws are deterministic per (seed, stream)", "[sampling]") {
  const auto sampler = make_sampler(SamplingOptions::sample(0.8f, 50, 0.9f, 0.02f));
  const int vocab = 300;
  // A sequence of 200 steps, each with its own logits.
  auto run = [&](uint64_t seed, uint64_t stream, Philox* interleaved) {
    Philox rng(seed, stream);
    Philox logit_source(1, 1);
    std::vector<float> logits(vocab), probs(vocab);
    std::vector<int> tokens;
    for (int step = 0; step < 200; ++step) {
      for (float& l : logits) l = float(6 * logit_source.uniform());
      sampler->distribution(logits, probs);
      tokens.push_back(sampler->draw(probs, rng));
      if (interleaved) sampler->draw(probs, *interleaved);  // another sequence's draws in between
    }
    CHECK(rng.draws() == 200);  // exactly one uniform per token
    return tokens;
  };
  const std::vector<int> a = run(5, 0, nullptr);
  Philox other(5, 1);
  CHECK(run(5, 0, &other) == a);
  CHECK(run(5, 1, nullptr) != a);
  CHECK(run(6, 0, nullptr) != a);

  // Greedy consumes its uniform too, so strategies can be mixed on one stream.
  Philox rng(5, 0);
  const auto greedy = make_sampler(SamplingOptions::sample(0.0f, 0, 1.0f, 0.0f));
  CHECK(greedy->draw(std::vector<float>{0, 1, 0}, rng) == 1);
  CHECK(rng.draws() == 1);
}
