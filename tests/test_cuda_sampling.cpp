// The sampling kernel (engine/cuda/sample.cu) against sampling/ ([gpu]: on a GPU, and on the
// host execution in CI): random rows of logits (vocabularies 1, 2, 7, 64, 1000, 4096 and one
// 32000; normal, tied at a few levels, flat, 0-or--inf, with -inf entries, peaked, of a huge
// range, and rows the CPU refuses), each with its own options (greedy; temperature alone;
// top-k, top-p, min-p each alone and chained), compared with chain_distribution (GreedySampler
// for greedy) and inverse_cdf on the same uniforms (random, 0, and on or beside a CPU CDF
// boundary). The contract checked:
//   - a row the CPU refuses is NaN with token -1, and no other row is;
//   - the support equals the CPU's, except where every differing token's top-p mass-before
//     lies within kMassBound * mass of p * mass but not on it (exact ties must agree);
//   - on an equal support, probabilities within kProbBound relative of the CPU's (and one
//     subnormal step);
//   - draws equal the CPU's, except where u * total lies within kDrawBound * total of a CPU
//     CDF boundary between the two tokens.
// The vocabulary-64 batch is launched again without uniforms: the same probabilities, tokens
// for greedy rows only.
// Each excused row is counted: supports at most 1% of the rows; draws at most 1% of those with
// a random uniform (those placed on a boundary are counted apart: many differ by design).
// The children kernel against draw_siblings, the dynamic-tree kernel against TreeGrowth's
// best-first growth (tied probabilities, so that equal scores meet the push-order rule), the
// tree-rows kernel against plan_batch and pack_step of the trees it was given, and the
// logit-edit kernel over drawn paths against RowControls::apply.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/exp_shifted.h"
#include "base/lane_sum.h"
#include "base/rng.h"
#include "draft/sibling_draw.h"
#include "draft/tree_growth.h"
#include "kv/block_tables.h"
#include "engine/device_verify.h"
#include "engine/batch.h"
#include "engine/cuda/cuda_plan.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_harness.h"
#include "sampling/logit_controls.h"
#include "sampling/logit_transforms.h"
#include "sampling/sampler.h"
#include "tests/test_gpu_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

// The kernel's sums differ from the CPU's by about vocab * 2^-53 relative (4e-12 at 32000).
constexpr long double kMassBound = 1e-9L;
// One float rounding of e / mass on each side, from masses that differ as above (plus one
// subnormal step, where the rounding is absolute).
constexpr double kProbBound = 0x1p-22;
// The CDF of probabilities within kProbBound, summed in another order.
constexpr double kDrawBound = 1e-6;

using Rng = std::mt19937_64;
int uniform_int(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
double uniform01(Rng& rng) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); }
bool coin(Rng& rng, double p) { return uniform01(rng) < p; }

struct Row {
  std::vector<float> logits;
  SamplingOptions options;
  double u = 0.0;
  bool placed = false;  // u set on or beside a CPU CDF boundary
  std::string kind;
  // The CPU's answer.
  bool refused = false;
  std::vector<float> probs;
  int token = -1;
};

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(Rng& rng, int vocab, std::string& kind) {
  std::vector<float> x(vocab);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int pick = uniform_int(rng, 0, 19);
  switch (pick) {
    case 0:
    case 1:
    case 2:
      kind = "normal";
      for (float& v : x) v = 2.0f * normal(rng);
      break;
    case 3:
    case 4:
    case 5: {
      kind = "tied levels";
      const float step = coin(rng, 0.5) ? 1.0f : 0.25f;
      const int levels = uniform_int(rng, 1, 4);
      for (float& v : x) v = step * static_cast<float>(uniform_int(rng, 0, levels - 1));
      break;
    }
    case 6:
    case 7:
      kind = "flat";
      std::fill(x.begin(), x.end(), normal(rng));
      break;
    case 8:
    case 9:
    case 10: {
      kind = "0 or -inf";  // numerators exactly 1: top-p masses are exact integers
      for (float& v : x) v = coin(rng, 0.6) ? 0.0f : -kInf;
      x[uniform_int(rng, 0, vocab - 1)] = 0.0f;
      break;
    }
    case 11:
    case 12:
      kind = "-inf entries";
      for (float& v : x) v = coin(rng, 0.3) ? -kInf : normal(rng);
      x[uniform_int(rng, 0, vocab - 1)] = normal(rng);
      break;
    case 13:
    case 14:
      kind = "peaked";
      for (float& v : x) v = normal(rng);
      x[uniform_int(rng, 0, vocab - 1)] += coin(rng, 0.5) ? 8.0f : 20.0f;
      break;
    case 15:
    case 16:
      kind = "huge range";  // most numerators underflow to 0
      for (float& v : x) v = 40.0f * normal(rng);
      break;
    case 17:
      kind = "-0 and +0 ties";
      for (float& v : x) v = coin(rng, 0.5) ? -0.0f : (coin(rng, 0.5) ? 0.0f : -1.0f);
      break;
    default: {
      kind = "refused";
      for (float& v : x) v = normal(rng);
      const int what = uniform_int(rng, 0, 2);
      if (what == 0) x[uniform_int(rng, 0, vocab - 1)] = std::numeric_limits<float>::quiet_NaN();
      if (what == 1) x[uniform_int(rng, 0, vocab - 1)] = kInf;
      if (what == 2) std::fill(x.begin(), x.end(), -kInf);
    }
  }
  return x;
}

SamplingOptions random_options(Rng& rng, int vocab, std::string& kind) {
  if (coin(rng, 0.1)) {
    kind += ", greedy";
    return SamplingOptions::sample(0.0f);
  }
  static constexpr float kTemperatures[] = {0.25f, 0.7f, 1.0f, 1.0f, 1.5f, 3.0f};
  static constexpr float kTopP[] = {1e-3f, 0.1f, 0.25f, 0.5f, 0.5f, 0.75f, 0.9f, 0.95f, 0.999f};
  static constexpr float kMinP[] = {1e-3f, 0.05f, 0.1f, 0.3f, 0.5f, 1.0f};
  SamplingOptions o = SamplingOptions::sample(kTemperatures[uniform_int(rng, 0, 5)]);
  const int transforms = uniform_int(rng, 0, 7);  // bits: top-k, top-p, min-p; each alone and chained
  if (transforms & 1) {
    const int ks[] = {1, 2, 3, 5, 10, 50, vocab - 1, vocab, vocab + 3};
    o.top_k = std::max(1, ks[uniform_int(rng, 0, 8)]);
  }
  if (transforms & 2)
    o.top_p = coin(rng, 0.7) ? kTopP[uniform_int(rng, 0, 8)] : static_cast<float>(uniform01(rng) * 0.99 + 0.005);
  if (transforms & 4) o.min_p = coin(rng, 0.7) ? kMinP[uniform_int(rng, 0, 5)] : static_cast<float>(uniform01(rng));
  std::ostringstream s;
  s << ", t " << o.temperature << " k " << o.top_k << " p " << o.top_p << " min_p " << o.min_p;
  kind += s.str();
  return o;
}

// The CPU's distribution and draw for the row (refused: it threw).
void reference(Row& r) {
  r.probs.assign(r.logits.size(), 0.0f);
  try {
    make_sampler(r.options)->distribution(r.logits, r.probs);
  } catch (const SpeculaError&) {
    r.refused = true;
    return;
  }
  r.token = inverse_cdf(r.probs, r.u);
}

// The CPU's prefix sums of probs in token order (inverse_cdf's) and their lane_sum total.
std::vector<double> cdf(const std::vector<float>& probs, double& total) {
  total = lane_sum(std::span<const float>(probs));
  std::vector<double> c(probs.size());
  double cumulative = 0.0;
  for (std::size_t i = 0; i < probs.size(); ++i) c[i] = cumulative += probs[i] > 0.0f ? probs[i] : 0.0f;
  return c;
}

// A uniform: random, 0, or on / beside the CPU's CDF boundary after a random token of the support.
double random_uniform(Rng& rng, Row& r) {
  const int kind = uniform_int(rng, 0, 9);
  if (kind == 0) return 0.0;
  if (kind >= 5 || r.refused) return uniform01(rng);
  double total = 0.0;
  const std::vector<double> c = cdf(r.probs, total);
  std::vector<int> support;
  for (std::size_t i = 0; i < r.probs.size(); ++i)
    if (r.probs[i] > 0.0f) support.push_back(static_cast<int>(i));
  if (support.size() < 2) return uniform01(rng);
  const double u = c[support[uniform_int(rng, 0, static_cast<int>(support.size()) - 2)]] / total;
  r.placed = true;
  const double moved = kind == 1 ? std::nextafter(u, 0.0) : kind == 2 ? std::nextafter(u, 1.0) : u;
  return std::clamp(moved, 0.0, std::nextafter(1.0, 0.0));
}

// True when every token whose support membership differs between `cpu` and `device` sits at
// the row's top-p boundary: its mass-before, in candidate order over the CPU's numerators,
// within kMassBound * mass of p * mass but not equal to it (long double sums).
bool top_p_boundary(const Row& r, const std::vector<float>& device) {
  const SamplingOptions& o = r.options;
  if (o.temperature == 0.0f || o.top_p >= 1.0f) return false;
  const int vocab = static_cast<int>(r.logits.size());
  std::vector<float> s(vocab);
  for (int i = 0; i < vocab; ++i) s[i] = r.logits[i] / o.temperature;
  const float top = *std::max_element(s.begin(), s.end());
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  int candidates = vocab;
  if (o.top_k > 0 && o.top_k < vocab) {
    const float kth = s[order[o.top_k - 1]];
    candidates = static_cast<int>(std::count_if(s.begin(), s.end(), [&](float v) { return v >= kth; }));
  }
  long double mass = 0.0L;
  for (int r_ = 0; r_ < candidates; ++r_) mass += exp_nonpositive(s[order[r_]] - top);
  const long double limit = static_cast<long double>(o.top_p) * mass;
  long double before = 0.0L;
  std::vector<long double> mass_before(vocab, -1.0L);
  for (int r_ = 0; r_ < candidates; ++r_) {
    mass_before[order[r_]] = before;
    before += exp_nonpositive(s[order[r_]] - top);
  }
  for (int i = 0; i < vocab; ++i) {
    if ((r.probs[i] > 0.0f) == (device[i] > 0.0f)) continue;
    const long double b = mass_before[i];
    if (b < 0.0L || b == limit || std::fabs(b - limit) > kMassBound * mass) return false;
  }
  return true;
}

// True when u * total lies within kDrawBound * total of a CPU CDF boundary between tokens a and b.
bool draw_boundary(const Row& r, int a, int b) {
  if (a < 0 || b < 0) return false;
  double total = 0.0;
  const std::vector<double> c = cdf(r.probs, total);
  const double target = r.u * total;
  for (int i = std::min(a, b); i < std::max(a, b); ++i)
    if (std::fabs(c[i] - target) <= kDrawBound * total) return true;
  return false;
}

std::string describe(const Row& r, const std::vector<float>& device, int token) {
  std::ostringstream s;
  s << r.kind << ", vocab " << r.logits.size() << ", u " << r.u << "; cpu token " << r.token << " device token "
    << token;
  if (r.logits.size() <= 64) {
    s << "; logits";
    for (float v : r.logits) s << ' ' << v;
  }
  int shown = 0;
  for (std::size_t i = 0; i < device.size() && shown < 12; ++i)
    if (r.probs[i] != device[i]) s << "; [" << i << "] cpu " << r.probs[i] << " device " << device[i], ++shown;
  return s.str();
}

}  // namespace

TEST_CASE("cuda kernels: sampling matches sampling/'s chain and draw", "[gpu]") {
  REQUIRE_GPU();
  // Rows per vocabulary (fewer under the sanitizers); one launch per vocabulary.
  const std::vector<std::pair<int, int>> plan =
      test::kSanitized ? std::vector<std::pair<int, int>>{{1, 50}, {2, 200}, {7, 300}, {64, 300},
                                                          {1000, 60}, {4096, 20}}
                       : std::vector<std::pair<int, int>>{{1, 300}, {2, 1000}, {7, 2000}, {64, 2000},
                                                          {1000, 500}, {4096, 300}, {32000, 8}};
  Rng rng(3801);
  const auto start = std::chrono::steady_clock::now();
  int rows = 0, refused = 0, greedy = 0, mismatches = 0, support_at_boundary = 0, draws_at_boundary = 0;
  int cut_rows = 0, draws_compared = 0, placed_draws = 0, placed_at_boundary = 0;
  double worst_relative = 0.0;
  for (const auto& [vocab, count] : plan) {
    std::vector<Row> batch(count);
    cuda::harness::SamplingBatch in;
    in.vocab = vocab;
    for (Row& r : batch) {
      r.logits = random_logits(rng, vocab, r.kind);
      r.options = random_options(rng, vocab, r.kind);
      reference(r);
      r.u = random_uniform(rng, r);
      if (!r.refused) r.token = inverse_cdf(r.probs, r.u);
      in.logits.insert(in.logits.end(), r.logits.begin(), r.logits.end());
      in.temperature.push_back(r.options.temperature);
      in.top_k.push_back(r.options.top_k);
      in.top_p.push_back(r.options.top_p);
      in.min_p.push_back(r.options.min_p);
      in.uniforms.push_back(r.u);
    }
    const cuda::harness::SampledRows out = cuda::harness::sample(in);
    if (vocab == 64) {
      // Without uniforms: the same probabilities, tokens for greedy rows only (-1 for a
      // refused one), sampled rows' tokens left unwritten (the harness's -1 poison).
      cuda::harness::SamplingBatch no_draws = in;
      no_draws.uniforms.clear();
      const cuda::harness::SampledRows alone = cuda::harness::sample(no_draws);
      CHECK(std::equal(alone.probs.begin(), alone.probs.end(), out.probs.begin(), out.probs.end(),
                       [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }));
      int wrong_tokens = 0;
      for (int i = 0; i < count; ++i)
        wrong_tokens += alone.tokens[i] != (batch[i].options.temperature == 0.0f ? out.tokens[i] : -1);
      CHECK(wrong_tokens == 0);
    }
    for (int i = 0; i < count; ++i) {
      const Row& r = batch[i];
      const std::vector<float> device(out.probs.begin() + static_cast<std::ptrdiff_t>(i) * vocab,
                                      out.probs.begin() + static_cast<std::ptrdiff_t>(i + 1) * vocab);
      const int token = out.tokens[i];
      ++rows;
      greedy += r.options.temperature == 0.0f;
      auto fail = [&](const char* what) {
        if (++mismatches <= 5) {
          INFO(what << ": " << describe(r, device, token));
          CHECK(false);
        }
      };
      const bool all_nan = std::all_of(device.begin(), device.end(), [](float v) { return std::isnan(v); });
      if (r.refused) {
        ++refused;
        if (!all_nan || token != -1) fail("the CPU refuses the row");
        continue;
      }
      if (std::any_of(device.begin(), device.end(), [](float v) { return std::isnan(v) || v < 0.0f; }) || token < 0) {
        fail("the device refused a row the CPU accepts");
        continue;
      }
      const int support =
          static_cast<int>(std::count_if(r.probs.begin(), r.probs.end(), [](float v) { return v > 0.0f; }));
      cut_rows += support < vocab;
      bool same_support = true;
      for (int v = 0; v < vocab; ++v) same_support = same_support && (r.probs[v] > 0.0f) == (device[v] > 0.0f);
      if (!same_support) {
        if (top_p_boundary(r, device))
          ++support_at_boundary;
        else
          fail("support differs");
        continue;
      }
      for (int v = 0; v < vocab; ++v) {
        if (r.probs[v] == 0.0f) continue;
        const double difference = std::fabs(double(device[v]) - double(r.probs[v]));
        if (r.probs[v] >= std::numeric_limits<float>::min())
          worst_relative = std::max(worst_relative, difference / r.probs[v]);
        if (difference > kProbBound * r.probs[v] + std::numeric_limits<float>::denorm_min()) {
          fail("probability beyond the bound");
          break;
        }
      }
      ++draws_compared;
      placed_draws += r.placed;
      if (token != r.token) {
        if (!draw_boundary(r, token, r.token))
          fail("draw differs");
        else if (r.placed)
          ++placed_at_boundary;
        else
          ++draws_at_boundary;
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("sampling: " << rows << " rows (" << greedy << " greedy, " << refused << " refused, " << cut_rows
                    << " with a support smaller than the vocabulary), " << mismatches << " mismatches; "
                    << support_at_boundary << " supports differing at a top-p boundary; "
                    << "draws differing at a CDF boundary: "
                    << draws_at_boundary << " of " << draws_compared - placed_draws << " random uniforms, "
                    << placed_at_boundary << " of " << placed_draws << " placed on one; worst probability "
                    << worst_relative << " relative; " << seconds << " s"
                    << (test::host_execution() ? " (host execution)" : ""));
  CHECK(mismatches == 0);
  CHECK(support_at_boundary <= rows / 100);
  CHECK(draws_at_boundary <= (draws_compared - placed_draws) / 100);
  CHECK(refused > 0);
  CHECK(greedy > 0);
  CHECK(cut_rows > rows / 4);
}

// The children kernel (launch_draw_children) against draw_siblings: draft distributions from
// the rows above (a NaN row where the CPU refuses), every draw mode, 0 to 6 children (more than
// the support, so some come back absent), the uniforms draw_siblings reads from its Philox; a
// third of the contexts name a source draw that is a token, absent or refused. SiblingDraw's
// values are the kDraw* codes. Draws must equal the CPU's, except without replacement where the
// mass left (the row less the earlier children) is below kTailMass: there the Residual's total,
// the row's sum less the removed weights, is cancellation (its error about 2^-53, the mass
// itself smaller), while the kernel sums the weights left. Elsewhere the two totals differ by
// about vocab * 2^-53 relative, and a random uniform lands that near a CDF boundary with
// probability about 1e-12. Excused contexts are counted: at most 1% of those drawn without
// replacement.
constexpr long double kTailMass = 1e-12L;

// Whether the first child where `device` and `cpu` differ was drawn without replacement from
// `q` with less than kTailMass left.
bool tail_draw(std::span<const float> q, int mode, const std::vector<int>& device, const std::vector<int>& cpu) {
  if (mode != kDrawWithoutReplacement) return false;
  std::size_t j = 0;
  while (device[j] == cpu[j]) ++j;
  long double left = 0.0L;
  for (std::size_t v = 0; v < q.size(); ++v)
    if (std::find(cpu.begin(), cpu.begin() + static_cast<std::ptrdiff_t>(j), static_cast<int>(v)) ==
        cpu.begin() + static_cast<std::ptrdiff_t>(j))
      left += q[v];
  return left < kTailMass;
}

TEST_CASE("cuda kernels: children drawn as draw_siblings draws them", "[gpu]") {
  REQUIRE_GPU();
  const std::vector<std::pair<int, int>> plan =
      test::kSanitized ? std::vector<std::pair<int, int>>{{1, 40}, {2, 100}, {7, 200}, {64, 200}, {1000, 40}}
                       : std::vector<std::pair<int, int>>{{1, 200}, {2, 800}, {7, 1500}, {64, 1500}, {1000, 400},
                                                          {4096, 150}};
  constexpr int kSources = 3;  // draws before the children: a token, an absent child, a refused draw
  Rng rng(3802);
  int contexts_drawn = 0, mismatches = 0, tail = 0, absent = 0, inherited = 0, refused = 0;
  std::ostringstream shown;  // the first mismatches
  std::map<int, int> by_mode;
  for (const auto& [vocab, count] : plan) {
    cuda::harness::ChildrenBatch in;
    in.vocab = vocab;
    in.tokens = {std::min(1, vocab - 1), kAbsentDraw, -1};
    in.child_first.push_back(kSources);
    std::vector<std::vector<int>> expected;  // [contexts] each context's children, padded
    for (int c = 0; c < count; ++c) {
      std::string kind;
      const std::vector<float> logits = random_logits(rng, vocab, kind);
      std::vector<float> q(static_cast<std::size_t>(vocab));
      bool row_refused = false;
      try {
        make_sampler(random_options(rng, vocab, kind))->distribution(logits, q);
      } catch (const SpeculaError&) {
        row_refused = true;
        std::fill(q.begin(), q.end(), std::numeric_limits<float>::quiet_NaN());
      }
      const int mode = uniform_int(rng, 0, 2);
      const int k = uniform_int(rng, 0, 6);
      const int source = coin(rng, 1.0 / 3) ? uniform_int(rng, 0, kSources - 1) : -1;
      // draw_siblings reads its uniforms from a Philox: the kernel gets the same stream's.
      const std::uint64_t seed = rng();
      Philox uniforms(seed), reference(seed);
      for (int j = 0; j < k; ++j) in.uniforms.push_back(uniforms.uniform());
      std::vector<int> want;
      if (source >= 0 && in.tokens[static_cast<std::size_t>(source)] < 0) {
        want.assign(static_cast<std::size_t>(k), in.tokens[static_cast<std::size_t>(source)]);
        inherited += k > 0;
      } else if (row_refused) {
        want.assign(static_cast<std::size_t>(k), -1);
        refused += k > 0;
      } else {
        want = draw_siblings(q, k, static_cast<SiblingDraw>(mode), reference);
        absent += k - static_cast<int>(want.size());
        want.resize(static_cast<std::size_t>(k), kAbsentDraw);
      }
      expected.push_back(want);
      in.probs.insert(in.probs.end(), q.begin(), q.end());
      in.mode.push_back(mode);
      in.source.push_back(source);
      in.child_first.push_back(in.child_first.back() + k);
      ++by_mode[mode];
      ++contexts_drawn;
    }
    in.uniforms.insert(in.uniforms.begin(), kSources, 0.0);
    in.tokens.resize(static_cast<std::size_t>(in.child_first.back()), std::numeric_limits<int>::min());
    const std::vector<int> got = cuda::harness::draw_children(in);
    REQUIRE(std::equal(got.begin(), got.begin() + kSources, in.tokens.begin()));
    for (int c = 0; c < count; ++c) {
      const std::size_t cu = static_cast<std::size_t>(c);
      const auto first = got.begin() + in.child_first[cu];
      const std::vector<int> children(first, first + static_cast<std::ptrdiff_t>(expected[cu].size()));
      if (children == expected[cu]) continue;
      const auto q = std::span<const float>(in.probs).subspan(cu * static_cast<std::size_t>(vocab),
                                                              static_cast<std::size_t>(vocab));
      if (tail_draw(q, in.mode[cu], children, expected[cu])) {
        ++tail;
        continue;
      }
      if (++mismatches <= 5)
        shown << "; vocab " << vocab << " context " << c << " mode " << in.mode[cu] << ": device "
              << ::Catch::Detail::stringify(children) << ", cpu " << ::Catch::Detail::stringify(expected[cu]);
    }
  }
  WARN("children: " << contexts_drawn << " contexts (" << by_mode[kDrawSampled] << " sampled, "
                    << by_mode[kDrawWithoutReplacement] << " without replacement, " << by_mode[kDrawTopK]
                    << " top-k), " << absent << " children absent, " << inherited << " contexts inheriting, "
                    << refused << " refused; " << mismatches << " mismatches, " << tail
                    << " differing with under " << static_cast<double>(kTailMass) << " of mass left");
  INFO(shown.str());
  CHECK(mismatches == 0);
  CHECK(tail <= by_mode[kDrawWithoutReplacement] / 100);
  CHECK(absent > 0);
  CHECK(inherited > 0);
  CHECK(refused > 0);
}

// Random dynamic trees grown by the kernel round by round (harness::grow_dynamic) and by
// TreeGrowth on the same q rows: each context's row over a small vocabulary of a few weight
// levels (ties among a row's tokens, and equal path scores across rows), top_k >= width so that
// every batch finds its nodes. The same nodes and parents, and each round's rows for the next:
// a node's token, position (the root's + depth, the root's read from the placeholder row: in the
// slot before the tree, or a position past it as in a head's cache) and depth, its mask the
// slots of its ancestors and itself, root first, nothing past it.
TEST_CASE("cuda kernels: dynamic trees grown as TreeGrowth grows them", "[gpu]") {
  REQUIRE_GPU();
  const int trials = test::kSanitized ? 40 : 400;
  Rng rng(4211);
  int nodes = 0, mismatches = 0, row_mismatches = 0;
  std::ostringstream shown;
  for (int trial = 0; trial < trials; ++trial) {
    cuda::harness::DynamicBatch in;
    in.sequences = uniform_int(rng, 1, 3);
    in.width = uniform_int(rng, 1, 4);
    in.top_k = in.width + uniform_int(rng, 0, 2);
    in.budget = uniform_int(rng, 1, 20);
    in.vocab = uniform_int(rng, in.top_k, 24);
    const int rounds = dynamic_rounds(in.budget, in.width);
    const std::size_t v = static_cast<std::size_t>(in.vocab);
    // Row c of sequence s: context c (0 the root, 1 + n after node n).
    std::vector<std::vector<std::vector<float>>> rows(static_cast<std::size_t>(in.sequences));
    for (auto& seq : rows)
      for (int c = 0; c <= (rounds - 1) * in.width; ++c) {
        std::vector<float> q(v);
        float total = 0;
        for (float& x : q) total += x = static_cast<float>(uniform_int(rng, 1, 3));
        for (float& x : q) x /= total;
        seq.push_back(std::move(q));
      }
    Philox unused(0);
    in.probs.resize(static_cast<std::size_t>(rounds));
    in.children.resize(static_cast<std::size_t>(rounds));
    for (int r = 0; r < rounds; ++r)
      for (int s = 0; s < in.sequences; ++s)
        for (int k = 0; k < (r == 0 ? 1 : in.width); ++k) {
          const std::size_t context = static_cast<std::size_t>(r == 0 ? 0 : (r - 1) * in.width + k + 1);
          const std::vector<float>& q = rows[static_cast<std::size_t>(s)][context];
          auto& probs = in.probs[static_cast<std::size_t>(r)];
          probs.insert(probs.end(), q.begin(), q.end());
          std::vector<int> top = draw_siblings(q, in.top_k, SiblingDraw::kTopK, unused);
          top.resize(static_cast<std::size_t>(in.top_k), kAbsentDraw);
          auto& children = in.children[static_cast<std::size_t>(r)];
          children.insert(children.end(), top.begin(), top.end());
        }
    // The root sits in the slot before the tree (a draft model's cache) or a position after it
    // (a head's, whose entries start at position 1).
    for (int s = 0; s < in.sequences; ++s) {
      in.tree_start.push_back(uniform_int(rng, 1, 100));
      in.root_position.push_back(in.tree_start.back() - 1 + uniform_int(rng, 0, 1));
    }
    const cuda::harness::DynamicGrowth got = cuda::harness::grow_dynamic(in);
    for (int s = 0; s < in.sequences; ++s) {
      const auto& seq = rows[static_cast<std::size_t>(s)];
      TreeGrowth growth(false, TreeShape{TreeTopology{}, in.budget, in.top_k, in.width});
      Philox host_rng(0);
      growth.begin(DraftBound{in.budget + 1}, host_rng);
      growth.proposal().q = seq[0];
      growth.root_ready(in.vocab);
      while (const std::optional<NodeFeed> feed = growth.pending()) {
        for (int n = feed->first; n < feed->last; ++n) {
          const std::vector<float>& q = seq[static_cast<std::size_t>(n + 1)];
          growth.proposal().q.insert(growth.proposal().q.end(), q.begin(), q.end());
        }
        growth.fed(*feed, in.vocab);
      }
      const TokenTree tree = growth.take(in.vocab).tree;
      const auto at = static_cast<std::ptrdiff_t>(s) * in.budget;
      const std::vector<int> tokens(got.tokens.begin() + at, got.tokens.begin() + at + in.budget);
      const std::vector<int> parents(got.parents.begin() + at, got.parents.begin() + at + in.budget);
      nodes += in.budget;
      if (tokens != tree.tokens || parents != tree.parent) {
        if (mismatches++ < 3) shown << "trial " << trial << " sequence " << s << "; ";
        continue;
      }
      // Round r (< rounds - 1) wrote the rows of nodes r * width .. for round r + 1.
      const int tree_start = in.tree_start[static_cast<std::size_t>(s)];
      const int root_position = in.root_position[static_cast<std::size_t>(s)];
      for (std::size_t r = 0; r + 1 < static_cast<std::size_t>(rounds); ++r)
        for (int k = 0; k < in.width; ++k) {
          const int node = static_cast<int>(r) * in.width + k;
          const std::size_t row = static_cast<std::size_t>(s * in.width + k);
          const cuda::RowDesc& d = got.rows[r][row];
          const int depth = tree.depth[static_cast<std::size_t>(node)];
          std::vector<int> expected;
          for (int n = node; n >= 0; n = tree.parent[static_cast<std::size_t>(n)])
            expected.insert(expected.begin(), tree_start + n);
          const auto mask = got.masks[r].begin() + static_cast<std::ptrdiff_t>(row) * in.budget;
          const bool same = d.token == tree.tokens[static_cast<std::size_t>(node)] &&
                            d.position == root_position + depth && d.num_extra == depth &&
                            std::equal(expected.begin(), expected.end(), mask) &&
                            (depth == in.budget || mask[depth] == -1);
          row_mismatches += same ? 0 : 1;
        }
    }
  }
  WARN("dynamic trees: " << trials << " batches, " << nodes << " nodes, " << mismatches << " trees differing ("
                         << shown.str() << "), " << row_mismatches << " rows differing");
  CHECK(mismatches == 0);
  CHECK(row_mismatches == 0);
}

// The logit-edit kernel against RowControls::apply over paths drawn on the device: random rows (vocabularies 7, 64 and 1000),
// each under its own random controls (every control but no_repeat_ngram_size, each set with
// some chance, min_new_tokens around the generated count so that the EOS mask lifts inside the
// path) over random prompt and generated tokens, and a random path (0 to 6 draws of a few
// tokens, so that tokens repeat, some absent or outside the vocabulary); some rows take no set.
// Every element must equal the CPU's bit for bit (NaN: any NaN; a row without a set: its own).
TEST_CASE("cuda kernels: rows edited over device-drawn paths as the host edits them", "[gpu]") {
  REQUIRE_GPU();
  constexpr int kEosIds[] = {1, 5};
  Rng rng(3811);
  int rows_checked = 0, mismatches = 0, eos_lifted = 0, repeated_on_path = 0;
  std::ostringstream shown;
  for (const int vocab : {7, 64, 1000}) {
    const int rows = test::kSanitized ? 60 : 300;
    std::vector<LogitControls> controls(static_cast<std::size_t>(rows));
    std::vector<PathEdits> sets(static_cast<std::size_t>(rows));
    std::vector<std::vector<int>> committed(static_cast<std::size_t>(rows)), paths(static_cast<std::size_t>(rows));
    std::vector<std::size_t> prompt_len(static_cast<std::size_t>(rows));
    cuda::harness::EditBatch in;
    in.vocab = vocab;
    DraftControls& draft = in.controls;
    draft.path_first.push_back(0);
    const auto token = [&] { return uniform_int(rng, 0, std::min(vocab, 12) - 1); };  // few: repeats
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
      LogitControls& c = controls[r];
      if (coin(rng, 0.5)) c.repetition_penalty = coin(rng, 0.5) ? 1.3f : 0.8f;
      if (coin(rng, 0.5)) c.frequency_penalty = static_cast<float>(uniform01(rng) * 4 - 2);
      if (coin(rng, 0.5)) c.presence_penalty = static_cast<float>(uniform01(rng) * 4 - 2);
      if (coin(rng, 0.3)) {
        c.logit_bias = {{token(), 1.5f}};
        if (c.logit_bias[0].first != vocab - 1) c.logit_bias.emplace_back(vocab - 1, -0.25f);
      }
      if (coin(rng, 0.3)) c.banned_tokens = {token()};
      const int prompt = uniform_int(rng, 1, 5), generated = uniform_int(rng, 0, 4);
      if (coin(rng, 0.4)) c.min_new_tokens = generated + uniform_int(rng, 0, 4);
      for (int i = 0; i < prompt + generated; ++i) committed[r].push_back(token());
      prompt_len[r] = static_cast<std::size_t>(prompt);
      const int length = uniform_int(rng, 0, 6);
      for (int i = 0; i < length; ++i) {
        const int pick = uniform_int(rng, 0, 19);
        paths[r].push_back(pick == 0 ? kAbsentDraw : pick == 1 ? vocab : token());
        draft.path_draws.push_back(static_cast<int>(in.tokens.size()));
        in.tokens.push_back(paths[r].back());
      }
      draft.path_first.push_back(static_cast<int>(draft.path_draws.size()));
      const RowControls row{&controls[r], prompt_len[r], kEosIds};
      const bool edited = row.active() && coin(rng, 0.9);
      if (edited) {
        row.path_edits(committed[r], vocab, sets[r]);
        draft.sets.push_back(&sets[r]);
      }
      draft.row_set.push_back(edited ? static_cast<int>(draft.sets.size()) - 1 : -1);
      std::string kind;
      const std::vector<float> logits = random_logits(rng, vocab, kind);
      in.logits.insert(in.logits.end(), logits.begin(), logits.end());
    }
    const std::vector<float> out = cuda::harness::edit_logits(in);
    REQUIRE(out.size() == in.logits.size());
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
      const std::size_t v = static_cast<std::size_t>(vocab);
      std::vector<float> expected(in.logits.begin() + static_cast<std::ptrdiff_t>(r * v),
                                  in.logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * v));
      if (draft.row_set[r] >= 0) RowControls{&controls[r], prompt_len[r], kEosIds}.apply(committed[r], paths[r], expected);
      const int generated = static_cast<int>(committed[r].size() - prompt_len[r]);
      eos_lifted += draft.row_set[r] >= 0 && controls[r].min_new_tokens > generated &&
                    generated + static_cast<int>(paths[r].size()) >= controls[r].min_new_tokens;
      repeated_on_path += std::set<int>(paths[r].begin(), paths[r].end()).size() < paths[r].size();
      ++rows_checked;
      const auto same = [](float a, float b) {
        return std::memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b));
      };
      if (std::equal(expected.begin(), expected.end(), out.begin() + static_cast<std::ptrdiff_t>(r * v), same)) continue;
      if (++mismatches <= 3) shown << " vocab " << vocab << " row " << r;
    }
  }
  WARN("path edits: " << rows_checked << " rows, " << eos_lifted << " with the EOS mask lifted on the path, "
                      << repeated_on_path << " with a repeated path token, " << mismatches << " differing ("
                      << shown.str() << ")");
  CHECK(eos_lifted > 0);
  CHECK(repeated_on_path > 0);
  CHECK(mismatches == 0);
}

// The rows of dynamic trees a verify step reads from the draft device, planned as chains
// (positions the root's + 1, poisoned) and rewritten by the tree-rows kernel from random trees
// (some with absent nodes, a tail of them under the root) against the rows pack_step lays out
// for the real trees: each node row's position, window start and mask (the root's slot, its
// ancestors' and its own), the rest of every row as planned.
TEST_CASE("cuda kernels: dynamic trees' verify rows as the host plans the trees", "[gpu]") {
  REQUIRE_GPU();
  const int trials = test::kSanitized ? 30 : 300;
  Rng rng(9127);
  ModelConfig config;
  config.vocab_size = 64;
  config.max_position_embeddings = 4096;
  int rows_checked = 0, mismatches = 0;
  std::ostringstream shown;
  for (int trial = 0; trial < trials; ++trial) {
    const int trees = uniform_int(rng, 1, 3), budget = uniform_int(rng, 1, 16);
    const int window = std::array{0, 3, 9}[static_cast<std::size_t>(uniform_int(rng, 0, 2))];
    std::vector<int> tokens, parents;       // [trees * budget] as the device grew them
    std::vector<std::vector<int>> real_tokens(static_cast<std::size_t>(trees)), real_positions = real_tokens,
                                  real_parents = real_tokens, chain_positions = real_tokens, chain_parents = real_tokens;
    BlockTables real_tables(256, 16), chain_tables(256, 16);
    std::vector<int> seqs, cached;
    for (int t = 0; t < trees; ++t) {
      seqs.push_back(real_tables.create());
      chain_tables.create();
      cached.push_back(uniform_int(rng, 0, 40));
    }
    std::vector<KvCopy> copies;
    real_tables.append(seqs, cached, copies);
    chain_tables.append(seqs, cached, copies);
    std::vector<SequenceRows> real, chain;
    for (int t = 0; t < trees; ++t) {
      const std::size_t tu = static_cast<std::size_t>(t);
      const int present = uniform_int(rng, 0, 2) == 0 ? uniform_int(rng, 1, budget) : budget;
      const int root_position = cached[tu] + uniform_int(rng, 0, 3);
      std::vector<int> depth;
      real_tokens[tu] = {5};
      real_positions[tu] = {root_position};
      real_parents[tu] = {-1};
      chain_positions[tu] = {root_position};
      chain_parents[tu] = {-1};
      for (int i = 0; i < budget; ++i) {
        const bool here = i < present;
        const int parent = here ? uniform_int(rng, -1, i - 1) : -1;
        depth.push_back(parent < 0 ? 1 : depth[static_cast<std::size_t>(parent)] + 1);
        tokens.push_back(here ? uniform_int(rng, 0, config.vocab_size - 1) : kAbsentDraw);
        parents.push_back(parent);
        real_tokens[tu].push_back(here ? tokens.back() : 0);
        real_positions[tu].push_back(root_position + depth.back());
        real_parents[tu].push_back(parent + 1);
        chain_positions[tu].push_back(root_position + 1);
        chain_parents[tu].push_back(i);
      }
      real.push_back(SequenceRows{seqs[tu], real_tokens[tu], real_positions[tu], real_parents[tu], RowLogits::kAll});
      chain.push_back(SequenceRows{seqs[tu], real_tokens[tu], chain_positions[tu], chain_parents[tu], RowLogits::kAll});
    }
    const RaggedBatch real_batch = plan_batch(real, real_tables, config), chain_batch = plan_batch(chain, chain_tables, config);
    const std::vector<int> counts = real_batch.rows_per_seq();
    const KvPlan real_plan = real_tables.append(seqs, counts, copies), chain_plan = chain_tables.append(seqs, counts, copies);
    const cuda::StepUpload expected = cuda::pack_step(real_batch, real_plan, window, cuda::CudaOptions{}, 0);
    cuda::StepUpload planned = cuda::pack_step(chain_batch, chain_plan, window, cuda::CudaOptions{}, 0);
    cuda::harness::TreeRowsBatch in;
    in.layout = planned.layout;
    in.budget = budget;
    in.window = window;
    in.node_tokens = tokens;
    in.node_parents = parents;
    auto* rows = reinterpret_cast<cuda::RowDesc*>(planned.data.data() + planned.layout.rows);
    for (int t = 0; t < trees; ++t) {
      const int root = chain_batch.row_indptr[static_cast<std::size_t>(t)];
      in.trees_at.insert(in.trees_at.end(), {root, t * budget});
      for (int i = 1; i <= budget; ++i) {
        cuda::RowDesc& d = rows[root + i];
        const auto mask = planned.data.begin() + static_cast<std::ptrdiff_t>(planned.layout.mask + static_cast<std::size_t>(d.extra_begin));
        std::fill(mask, mask + d.num_extra, -1);
        d.position = d.num_extra = d.first = -1;
      }
    }
    in.upload = planned.data;
    const std::vector<std::int32_t> got = cuda::harness::tree_rows(in);
    const auto* got_rows = reinterpret_cast<const cuda::RowDesc*>(got.data() + planned.layout.rows);
    const auto* want_rows = reinterpret_cast<const cuda::RowDesc*>(expected.data.data() + expected.layout.rows);
    const auto* planned_rows = reinterpret_cast<const cuda::RowDesc*>(in.upload.data() + planned.layout.rows);
    for (int r = 0; r < real_batch.num_rows(); ++r) {
      const cuda::RowDesc &g = got_rows[r], &w = want_rows[r], &p = planned_rows[r];
      const bool node = std::find(in.trees_at.begin(), in.trees_at.end(), r) == in.trees_at.end();
      bool same = g.token == w.token && g.position == w.position && g.slot == w.slot && g.pages_begin == w.pages_begin &&
                  g.prefix_len == w.prefix_len && g.num_extra == w.num_extra && g.first == w.first &&
                  g.extra_begin == p.extra_begin;
      for (int k = 0; same && k < w.num_extra; ++k)
        same = got[planned.layout.mask + static_cast<std::size_t>(g.extra_begin + k)] ==
               expected.data[expected.layout.mask + static_cast<std::size_t>(w.extra_begin + k)];
      ++rows_checked;
      if (!same && mismatches++ < 3) shown << "trial " << trial << " row " << r << (node ? " (a node)" : " (a root)") << "; ";
    }
  }
  WARN("tree rows: " << trials << " steps, " << rows_checked << " rows, " << mismatches << " differing (" << shown.str() << ")");
  CHECK(mismatches == 0);
}

}  // namespace specula
