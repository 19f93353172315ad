// Hand-computed tables for every transform of Sampler::distribution and their compositions
// (llama.cpp's test-sampling style: a 4-token vocabulary with probabilities 0.1..0.4, so
// each expected row is a fraction written by hand), the option validation, the transform
// chain's rows pinned bit for bit and its order against swapped chains, the partial top-p
// selection against a plain full-sort reference on random inputs, and the softmax
// numerators' exp against std::exp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/exp_shifted.h"
#include "sampling/logit_transforms.h"
#include "sampling/sampler.h"

using namespace specula;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> log_of(std::vector<float> probs) {
  for (float& p : probs) p = std::log(p);
  return probs;
}

std::vector<float> distribution(const SamplingOptions& options, const std::vector<float>& logits) {
  std::vector<float> probs(logits.size(), -1.0f);
  make_sampler(options)->distribution(logits, probs);
  return probs;
}

void check_row(const std::vector<float>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("token " << i);
    if (expected[i] == 0.0) {
      CHECK(actual[i] == 0.0f);  // outside the kept set: exactly zero
    } else {
      CHECK(actual[i] == Approx(expected[i]).margin(1e-6));
    }
  }
}

// The 4-token table: probabilities 0.1, 0.2, 0.3, 0.4 as logits.
const std::vector<float> kTable = log_of({0.1f, 0.2f, 0.3f, 0.4f});

}  // namespace

TEST_CASE("greedy is the one-hot argmax, ties to the lowest id", "[sampling]") {
  SamplingOptions greedy;
  greedy.strategy = Strategy::kGreedy;
  check_row(distribution(greedy, kTable), {0, 0, 0, 1});
  check_row(distribution(greedy, {0.1f, 0.4f, 0.4f, 0.1f}), {0, 1, 0, 0});
  check_row(distribution(greedy, {-kInf, -kInf, 3.0f, -kInf}), {0, 0, 1, 0});
  CHECK(argmax(std::vector<float>{2, 5, 5, 1}) == 1);
  CHECK(argmax(std::vector<float>{std::nanf(""), 1, 3, 3, 2, 0, 0, 0, 0, 3.5f, 1}) == 9);  // NaN ignored
  CHECK(argmax(std::vector<float>{-kInf, -kInf}) == 0);
  // Against the plain scan (the first value greater than every one before it that is the
  // maximum, NaN never), on lengths across the 8-lane blocks and their tails, with ties, NaN,
  // -inf and signed zeros drawn from a few values.
  std::mt19937 gen(9);
  const float pool[] = {std::nanf(""), -kInf, -0.0f, 0.0f, 1.0f, 1.0f, 2.0f, -3.0f};
  for (int length = 1; length <= 70; ++length) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> values(static_cast<std::size_t>(length));
      for (float& v : values) v = pool[gen() % std::size(pool)];
      int want = 0;
      float best = -kInf;
      bool found = false;
      for (int i = 0; i < length; ++i) {
        const float v = values[static_cast<std::size_t>(i)];
        if (v > best || (!found && v == best)) want = i, best = v, found = true;
      }
      INFO("length " << length << ", trial " << trial);
      REQUIRE(argmax(values) == want);
    }
  }
  // Temperature 0 is greedy; greedy ignores the other transforms (the argmax survives them).
  check_row(distribution(SamplingOptions::sample(0.0f, 2, 0.5f, 0.5f), {0.3f, 0.9f, 0.9f, 0.1f}), {0, 1, 0, 0});
  CHECK(make_sampler(SamplingOptions::sample(0.0f))->is_greedy());
  CHECK(make_sampler(greedy)->is_greedy());
  CHECK_FALSE(make_sampler(SamplingOptions::sample(1.0f))->is_greedy());
  // NaN or +inf logits are refused as sampling refuses them, not decoded as token 0.
  CHECK_THROWS_WITH(distribution(greedy, {0.0f, std::nanf(""), 1.0f}), "sampler: logit 1 is nan");
  CHECK_THROWS_WITH(distribution(greedy, {std::nanf(""), std::nanf("")}), "sampler: logit 0 is nan");
  CHECK_THROWS_WITH(distribution(greedy, {0.0f, kInf}), "sampler: logit 1 is inf");
  CHECK(greedy_token(std::vector<float>{-kInf, 2.0f, 1.0f}) == 1);
}

TEST_CASE("temperature divides the logits", "[sampling]") {
  check_row(distribution(SamplingOptions::sample(1.0f), kTable), {0.1, 0.2, 0.3, 0.4});
  // T = 0.5 squares the probabilities: 1, 4, 9, 16 over 30.
  check_row(distribution(SamplingOptions::sample(0.5f), kTable), {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0});
  // T = 2 takes square roots.
  const double s = std::sqrt(0.1) + std::sqrt(0.2) + std::sqrt(0.3) + std::sqrt(0.4);
  check_row(distribution(SamplingOptions::sample(2.0f), kTable),
            {std::sqrt(0.1) / s, std::sqrt(0.2) / s, std::sqrt(0.3) / s, std::sqrt(0.4) / s});
  // Masked (-inf) tokens stay at zero.
  check_row(distribution(SamplingOptions::sample(0.7f), {-kInf, 0.0f, 0.0f, -kInf}), {0, 0.5, 0.5, 0});
  // Logits no distribution can come from are errors, not silent garbage.
  CHECK_THROWS_WITH(distribution(SamplingOptions::sample(1.0f), {0.0f, std::nanf(""), 1.0f}), "sampler: logit 1 is nan");
  CHECK_THROWS_WITH(distribution(SamplingOptions::sample(1.0f), {0.0f, 1.0f, kInf}), "sampler: logit 2 is inf");
  CHECK_THROWS_WITH(distribution(SamplingOptions::sample(1.0f), {-kInf, -kInf}), "sampler: every logit is -inf");
  // A temperature so small that a finite logit / T overflows is named as the cause.
  CHECK_THROWS_WITH(distribution(SamplingOptions::sample(1e-38f), {0.0f, 100.0f}),
                    Catch::Contains("temperature 1e-38 is too small: logit 1 (100)"));
}

TEST_CASE("top-k keeps the k largest, and every token tied with the k-th (HF)", "[sampling]") {
  check_row(distribution(SamplingOptions::sample(1.0f, 1), kTable), {0, 0, 0, 1});
  check_row(distribution(SamplingOptions::sample(1.0f, 2), kTable), {0, 0, 3 / 7.0, 4 / 7.0});
  check_row(distribution(SamplingOptions::sample(1.0f, 3), kTable), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
  check_row(distribution(SamplingOptions::sample(1.0f, 4), kTable), {0.1, 0.2, 0.3, 0.4});
  check_row(distribution(SamplingOptions::sample(1.0f, 10), kTable), {0.1, 0.2, 0.3, 0.4});
  // Ties at the k-th value: logits 1, 2, 2, 0.
  const std::vector<float> tied = {1.0f, 2.0f, 2.0f, 0.0f};
  check_row(distribution(SamplingOptions::sample(1.0f, 1), tied), {0, 0.5, 0.5, 0});
  check_row(distribution(SamplingOptions::sample(1.0f, 2), tied), {0, 0.5, 0.5, 0});
  const double e = std::exp(1.0), z = e + 2 * e * e;
  check_row(distribution(SamplingOptions::sample(1.0f, 3), tied), {e / z, e * e / z, e * e / z, 0});
}

TEST_CASE("top-p keeps the smallest prefix whose mass reaches p", "[sampling]") {
  // Descending masses 0.4, 0.7, 0.9, 1.0.
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.35f), kTable), {0, 0, 0, 1});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.5f), kTable), {0, 0, 3 / 7.0, 4 / 7.0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.75f), kTable), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.95f), kTable), {0.1, 0.2, 0.3, 0.4});
  // Exact boundaries on four equal logits (numerators exactly 1, masses exact integers):
  // mass reaching p exactly stops the nucleus; ties are ordered by lower id first.
  const std::vector<float> flat = {0.0f, 0.0f, 0.0f, 0.0f};
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.25f), flat), {1, 0, 0, 0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.5f), flat), {0.5, 0.5, 0, 0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.5000001f), flat), {1 / 3.0, 1 / 3.0, 1 / 3.0, 0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 1.0f), flat), {0.25, 0.25, 0.25, 0.25});
  // Ties in the middle: ids 1 and 2 tie; p = 0.5 of (2, 1, 1, 0.5)/4.5 keeps 0 and 1.
  const double l2 = std::log(2.0), lh = std::log(0.5);
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.5f), {float(l2), 0.0f, 0.0f, float(lh)}), {2 / 3.0, 1 / 3.0, 0, 0});
}

TEST_CASE("min-p keeps probabilities >= min_p times the top one", "[sampling]") {
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 1.0f, 0.2f), kTable), {0.1, 0.2, 0.3, 0.4});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 1.0f, 0.45f), kTable), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 1.0f, 0.55f), kTable), {0, 0, 3 / 7.0, 4 / 7.0});
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 1.0f, 0.8f), kTable), {0, 0, 0, 1});
  // min_p = 1 keeps exactly the tokens tied with the top.
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 1.0f, 1.0f), {1.0f, 2.0f, 2.0f, 0.0f}), {0, 0.5, 0.5, 0});
}

TEST_CASE("transforms compose in HF order: temperature, top-k, top-p, min-p", "[sampling]") {
  // T = 0.5 -> (1, 4, 9, 16)/30; top-k 3 -> (4, 9, 16)/29; top-p 0.6: 16/29 = 0.55 < 0.6,
  // 25/29 >= 0.6 -> (9, 16)/25.
  check_row(distribution(SamplingOptions::sample(0.5f, 3, 0.6f), kTable), {0, 0, 0.36, 0.64});
  // ... then min-p 0.5 keeps 9/16 = 0.5625 of the top, min-p 0.6 does not.
  check_row(distribution(SamplingOptions::sample(0.5f, 3, 0.6f, 0.5f), kTable), {0, 0, 0.36, 0.64});
  check_row(distribution(SamplingOptions::sample(0.5f, 3, 0.6f, 0.6f), kTable), {0, 0, 0, 1});

  // Temperature before top-p: T = 2 gives masses 0.325, 0.607, 0.837, so p = 0.65 keeps
  // three tokens (top-p first would keep 0.4 + 0.3 only).
  const double s = std::sqrt(0.2) + std::sqrt(0.3) + std::sqrt(0.4);
  check_row(distribution(SamplingOptions::sample(2.0f, 0, 0.65f), kTable),
            {0, std::sqrt(0.2) / s, std::sqrt(0.3) / s, std::sqrt(0.4) / s});

  // Top-k before top-p: top-k 2 renormalises to (3/7, 4/7), whose first mass 0.57 >= 0.5
  // (top-p first would keep 0.4 + 0.3, then top-k 2 both).
  check_row(distribution(SamplingOptions::sample(1.0f, 2, 0.5f), kTable), {0, 0, 0, 1});

  // Top-p before min-p: top-p 0.75 keeps 0.2, 0.3, 0.4; min-p 0.45 keeps the same three
  // (min-p first would renormalise to 2/9, 3/9, 4/9, and top-p 0.75 would then drop 2/9).
  check_row(distribution(SamplingOptions::sample(1.0f, 0, 0.75f, 0.45f), kTable), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
}

TEST_CASE("inverse_cdf maps a uniform through the cumulative sums, skipping zeros", "[sampling]") {
  const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f};
  CHECK(inverse_cdf(probs, 0.0) == 0);
  CHECK(inverse_cdf(probs, 0.09) == 0);
  CHECK(inverse_cdf(probs, 0.11) == 1);
  CHECK(inverse_cdf(probs, 0.29) == 1);
  CHECK(inverse_cdf(probs, 0.31) == 2);
  CHECK(inverse_cdf(probs, 0.59) == 2);
  CHECK(inverse_cdf(probs, 0.61) == 3);
  CHECK(inverse_cdf(probs, 1.0 - 0x1.0p-53) == 3);
  // Unnormalised input is scaled by its sum; zero-probability tokens are never returned.
  CHECK(inverse_cdf(std::vector<float>{0, 2, 0, 2, 0}, 0.0) == 1);
  CHECK(inverse_cdf(std::vector<float>{0, 2, 0, 2, 0}, 0.5) == 3);
  CHECK(inverse_cdf(std::vector<float>{0, 2, 0, 2, 0}, 1.0 - 0x1.0p-53) == 3);
}

TEST_CASE("bad sampling options are rejected naming the option", "[sampling]") {
  // Errors name the option through OptionNames: a config key by default, where it was set first.
  OptionNames names;
  names.where = [](std::string_view) { return std::string("cfg.toml:3:1: "); };
  auto rejects = [&](SamplingOptions o, const std::string& message) {
    CHECK_THROWS_WITH(validate_sampling_options(o), message);
    CHECK_THROWS_WITH(validate_sampling_options(o, names), "cfg.toml:3:1: " + message);
    CHECK_THROWS_AS(make_sampler(o), SpeculaError);
  };
  rejects(SamplingOptions::sample(-1.0f), "sampling.temperature must be >= 0 and finite, got -1");
  rejects(SamplingOptions::sample(kInf), "sampling.temperature must be >= 0 and finite, got inf");
  rejects(SamplingOptions::sample(1.0f, -1), "sampling.top_k must be >= 0, got -1");
  rejects(SamplingOptions::sample(1.0f, 0, 0.0f), "sampling.top_p must be in (0, 1], got 0");
  rejects(SamplingOptions::sample(1.0f, 0, 1.5f), "sampling.top_p must be in (0, 1], got 1.5");
  rejects(SamplingOptions::sample(1.0f, 0, 1.0f, -0.1f), "sampling.min_p must be in [0, 1], got -0.1");
  rejects(SamplingOptions::sample(1.0f, 0, 1.0f, 1.5f), "sampling.min_p must be in [0, 1], got 1.5");
  SamplingOptions o = SamplingOptions::sample();
  o.beam_width = 0;
  rejects(o, "sampling.beam_width must be >= 1, got 0");
  o = SamplingOptions::sample();
  o.length_penalty = std::numeric_limits<float>::quiet_NaN();
  rejects(o, "sampling.length_penalty must be finite, got nan");
  o.length_penalty = 1.0f;

  // Beam search is valid but is not a token sampler.
  o.strategy = Strategy::kBeam;
  CHECK_NOTHROW(validate_sampling_options(o));
  CHECK_THROWS_WITH(make_sampler(o), Catch::Contains("beam_search"));
  std::vector<Strategy> strategies;
  for (const auto& entry : sampler_factories()) strategies.push_back(entry.first);
  CHECK(strategies == std::vector<Strategy>{Strategy::kGreedy, Strategy::kSample});
  // Every strategy has one spelling, parsed back to itself; others are refused.
  for (Strategy s : {Strategy::kGreedy, Strategy::kSample, Strategy::kBeam}) CHECK(parse_enum<Strategy>(name_of(s)) == s);
  CHECK_FALSE(parse_enum<Strategy>("nucleus").has_value());
}

namespace {

std::vector<float> chain_row(const std::vector<LogitTransform>& chain, const std::vector<float>& logits) {
  std::vector<float> probs(logits.size(), -1.0f);
  chain_distribution(chain, logits, probs);
  return probs;
}

std::vector<uint32_t> bits(const std::vector<float>& row) {
  std::vector<uint32_t> out(row.size());
  std::transform(row.begin(), row.end(), out.begin(), [](float v) { return std::bit_cast<uint32_t>(v); });
  return out;
}

// FNV-1a over the bytes of a row's bits, continuing from `digest`.
uint64_t fold(uint64_t digest, const std::vector<float>& row) {
  for (uint32_t word : bits(row)) {
    for (int byte = 0; byte < 4; ++byte) digest = (digest ^ ((word >> (8 * byte)) & 0xffu)) * 0x100000001b3ull;
  }
  return digest;
}

}  // namespace

// Transform chains, from options and composed by hand.  The rows of a grid of settings on
// random logits (smooth, tied, with -inf), digested per vocabulary, pin the chain's
// distribution bit for bit: a change to a digest changes sampled tokens (top-k's mass is
// summed in the order libstdc++'s std::nth_element leaves its candidates in).  Each adjacent
// pair of the chain swapped gives another row for some input; the sampler gives the row of
// Hugging Face's order.
TEST_CASE("transform chains: rows bit for bit, in Hugging Face's order", "[sampling]") {
  const int vocabs[] = {1, 7, 64, 1000, 4099};
  const uint64_t digests[] = {0xdfc4465c7e3792a5, 0x3474c236cfd48ed, 0x16caf0e5cf2f34e0, 0xf70aa7514d915c15,
                              0x79585c6c4cf93311};
  Philox rng(34);
  for (int v = 0; v < 5; ++v) {
    const int vocab = vocabs[v];
    uint64_t digest = 0xcbf29ce484222325;
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> logits(static_cast<std::size_t>(vocab));
      for (std::size_t i = 0; i < logits.size(); ++i) {
        logits[i] = float((kind == 0 ? 1.0 : 6.0) * (2 * rng.uniform() - 1));
        if (kind == 1) logits[i] = std::round(logits[i] * 2) / 2;
        if (kind == 2 && i > 0 && rng.uniform() < 0.2) logits[i] = -kInf;
      }
      for (float temperature : {0.3f, 1.0f, 1.7f}) {
        for (int top_k : {0, 1, 5, 50}) {
          for (float top_p : {0.07f, 0.5f, 0.93f, 1.0f}) {
            for (float min_p : {0.0f, 0.003f, 0.2f}) {
              const auto chain = transform_chain(SamplingOptions::sample(temperature, top_k, top_p, min_p));
              digest = fold(digest, chain_row(chain, logits));
            }
          }
        }
      }
    }
    INFO("vocab " << vocab << " digest 0x" << std::hex << digest);
    CHECK(digest == digests[v]);
  }

  std::vector<std::size_t> order;
  for (const LogitTransform& t : transform_chain(SamplingOptions::sample(0.5f, 3, 0.6f, 0.5f))) order.push_back(t.index());
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 3});  // temperature, top-k, top-p, min-p
  struct Case {
    SamplingOptions options;
    std::vector<float> logits;
    std::vector<LogitTransform> documented, swapped;
  };
  // Dividing by 1.5 rounds the adjacent floats a < b to one score, whose tie top-k 1 keeps.
  const float a = std::nextafter(1.5f, 2.0f), b = std::nextafter(a, 2.0f);
  const Case cases[] = {
      {SamplingOptions::sample(1.5f, 1), {a, b, 0.0f}, {Temperature{1.5f}, TopK{1}}, {TopK{1}, Temperature{1.5f}}},
      {SamplingOptions::sample(1.0f, 2, 0.5f), kTable, {Temperature{1.0f}, TopK{2}, TopP{0.5f}},
       {Temperature{1.0f}, TopP{0.5f}, TopK{2}}},
      {SamplingOptions::sample(1.0f, 0, 0.75f, 0.45f), kTable, {Temperature{1.0f}, TopP{0.75f}, MinP{0.45f}},
       {Temperature{1.0f}, MinP{0.45f}, TopP{0.75f}}},
  };
  for (const Case& c : cases) {
    const std::vector<float> row = distribution(c.options, c.logits);
    CHECK(bits(row) == bits(chain_row(c.documented, c.logits)));
    CHECK(bits(row) != bits(chain_row(c.swapped, c.logits)));
  }
  check_row(distribution(cases[0].options, cases[0].logits), {0.5, 0.5, 0});
}

namespace {

// Plain reference: sort the whole vocabulary, then apply the definitions literally.
std::vector<float> reference(const std::vector<float>& logits, const SamplingOptions& o) {
  const int vocab = int(logits.size());
  std::vector<float> x(vocab);
  for (int i = 0; i < vocab; ++i) x[i] = logits[i] / o.temperature;
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  int n = vocab;
  if (o.top_k > 0 && o.top_k < vocab) {
    n = o.top_k;
    while (n < vocab && x[order[n]] >= x[order[o.top_k - 1]]) ++n;
  }
  std::vector<float> e(vocab, 0.0f);  // softmax numerators, as float like the sampler's
  double z = 0.0;
  for (int r = 0; r < n; ++r) z += e[order[r]] = std::exp(x[order[r]] - x[order[0]]);
  int kept = n;
  if (o.top_p < 1.0f) {
    double before = 0.0;
    for (kept = 0; kept < n && before < double(o.top_p) * z; ++kept) before += e[order[kept]];
  }
  double mass = 0.0;
  for (int r = 0; r < kept; ++r) mass += e[order[r]] >= o.min_p ? e[order[r]] : 0.0f;
  std::vector<float> probs(vocab, 0.0f);
  for (int r = 0; r < kept; ++r) {
    if (e[order[r]] >= o.min_p) probs[order[r]] = float(e[order[r]] / mass);
  }
  return probs;
}

}  // namespace

TEST_CASE("partial top-p selection equals a full sort on random logits", "[sampling]") {
  Philox rng(2024);
  const int vocabs[] = {1, 3, 64, 65, 200, 1000, 5000};
  const int top_ks[] = {0, 1, 5, 50, 100000};
  const float top_ps[] = {0.07f, 0.37f, 0.71f, 0.93f, 0.999f, 1.0f};
  const float min_ps[] = {0.0f, 0.003f, 0.2f};
  int cases = 0;
  for (int vocab : vocabs) {
    for (int trial = 0; trial < 12; ++trial) {
      // Spread from flat (0.05) to peaked (8); odd trials quantise to 0.25 to create ties.
      const double spread = 0.05 * std::pow(160.0, rng.uniform());
      std::vector<float> logits(vocab);
      for (float& l : logits) {
        l = float(spread * (rng.uniform() * 2 - 1) * (rng.uniform() < 0.01 ? 4 : 1));
        if (trial % 2) l = std::round(l * 4) / 4;
      }
      SamplingOptions o = SamplingOptions::sample(float(0.3 + 1.7 * rng.uniform()), top_ks[trial % 5], top_ps[trial % 6],
                                 min_ps[trial % 3]);
      const std::vector<float> expected = reference(logits, o);
      const std::vector<float> actual = distribution(o, logits);
      INFO("vocab " << vocab << " trial " << trial);
      for (int i = 0; i < vocab; ++i) {
        REQUIRE((actual[i] > 0) == (expected[i] > 0));
        REQUIRE(actual[i] == Approx(expected[i]).margin(1e-6));
      }
      ++cases;
    }
  }
  CHECK(cases == 84);
}

// The samplers' softmax numerators (base/exp_shifted.h) against std::exp: within 1 ulp where
// the result is a normal float (every 4096th float of [-87.3, 0]), within 2 of the smallest
// denormal below that, 0 where std::exp is 0 and for -inf; and exp_shifted is the same
// function of x - shift.
TEST_CASE("the softmax numerators' exp is within 1 ulp of std::exp", "[sampling]") {
  long checked = 0, off = 0;
  float worst = 0;
  for (uint32_t bits = 0x80000000u; bits <= std::bit_cast<uint32_t>(-103.97f); bits += 4096, ++checked) {
    const float d = std::bit_cast<float>(bits);
    const double ours = exp_nonpositive(d), libm = std::exp(d);
    const double allowed = libm >= std::numeric_limits<float>::min()
                               ? std::nextafter(float(libm), kInf) - float(libm)
                               : 2.0 * std::numeric_limits<float>::denorm_min();
    if (std::fabs(ours - libm) > allowed) ++off, worst = d;
  }
  INFO("last argument out of bounds: " << worst);
  CHECK(off == 0);
  CHECK(checked > 250000);
  CHECK(exp_nonpositive(0.0f) == 1.0f);
  CHECK(exp_nonpositive(-104.0f) == 0.0f);
  CHECK(exp_nonpositive(-1e30f) == 0.0f);
  CHECK(exp_nonpositive(-kInf) == 0.0f);
  const std::vector<float> x = {3.0f, -kInf, 1.5f, 2.25f};
  std::vector<float> out(x.size());
  exp_shifted(x, 3.0f, out);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(out[i] == exp_nonpositive(x[i] - 3.0f));
}
