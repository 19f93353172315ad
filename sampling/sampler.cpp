#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/lane_sum.h"
#include "sampling/greedy_sampler.h"
#include "sampling/stochastic_sampler.h"

namespace specula {

int Sampler::draw(std::span<const float> probs, Philox& rng) const { return inverse_cdf(probs, rng.uniform()); }

int argmax(std::span<const float> values) {
  assert(!values.empty());
  // The maximum over 8 interleaved lanes, then its first occurrence. The lanes select by bit
  // mask, so that the loop vectorises (GCC does not if-convert a float `?:` without
  // -ffast-math: it would run one float at a time).
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float lanes[8] = {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest};
  std::size_t i = 0;
  for (; i + 8 <= values.size(); i += 8) {
    for (int lane = 0; lane < 8; ++lane) {
      const float v = values[i + static_cast<std::size_t>(lane)];
      const uint32_t take = 0u - static_cast<uint32_t>(v > lanes[lane]);
      lanes[lane] = std::bit_cast<float>((std::bit_cast<uint32_t>(v) & take) | (std::bit_cast<uint32_t>(lanes[lane]) & ~take));
    }
  }
  float max = kLowest;
  for (float v : lanes) max = v > max ? v : max;
  for (; i < values.size(); ++i) max = values[i] > max ? values[i] : max;
  const auto first = std::find(values.begin(), values.end(), max);
  return first == values.end() ? 0 : int(first - values.begin());  // all NaN: 0
}

int greedy_token(std::span<const float> logits) {
  const int best = argmax(logits);
  unsigned any_nan = 0;  // an integer OR, so that the check vectorises
  for (float v : logits) any_nan |= std::isnan(v) ? 1u : 0u;
  if (!(logits[static_cast<std::size_t>(best)] < std::numeric_limits<float>::infinity()) || any_nan != 0) {
    const auto bad = std::find_if(logits.begin(), logits.end(), [](float v) { return !(v < std::numeric_limits<float>::infinity()); });
    throw SpeculaError(detail::concat("sampler: logit ", bad - logits.begin(), " is ", *bad));
  }
  return best;
}

int inverse_cdf(std::span<const float> probs, double u) {
  const double target = u * lane_sum(probs);
  double cumulative = 0.0;
  int last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cumulative += probs[i];
    last = int(i);
    if (cumulative > target) return last;
  }
  // Only reachable when u * total is not below the left-to-right sum (rounding): the last
  // token of positive mass.
  assert(last >= 0);
  return last;
}

void validate_sampling_options(const SamplingOptions& o, const OptionNames& names) {
  SPECULA_CHECK(o.temperature >= 0.0f && std::isfinite(o.temperature), names.at("sampling.temperature"),
                " must be >= 0 and finite, got ", o.temperature);
  SPECULA_CHECK(o.top_k >= 0, names.at("sampling.top_k"), " must be >= 0, got ", o.top_k);
  SPECULA_CHECK(o.top_p > 0.0f && o.top_p <= 1.0f, names.at("sampling.top_p"), " must be in (0, 1], got ", o.top_p);
  SPECULA_CHECK(o.min_p >= 0.0f && o.min_p <= 1.0f, names.at("sampling.min_p"), " must be in [0, 1], got ", o.min_p);
  SPECULA_CHECK(o.beam_width >= 1, names.at("sampling.beam_width"), " must be >= 1, got ", o.beam_width);
  SPECULA_CHECK(std::isfinite(o.length_penalty), names.at("sampling.length_penalty"), " must be finite, got ",
                o.length_penalty);
}

const std::map<Strategy, SamplerFactory>& sampler_factories() {
  static const std::map<Strategy, SamplerFactory> table = {
      {Strategy::kGreedy,
       [](const SamplingOptions&) -> std::unique_ptr<Sampler> { return std::make_unique<GreedySampler>(); }},
      {Strategy::kSample,
       [](const SamplingOptions& o) -> std::unique_ptr<Sampler> {
         if (o.temperature == 0.0f) return std::make_unique<GreedySampler>();
         return std::make_unique<StochasticSampler>(o);
       }},
  };
  return table;
}

std::unique_ptr<Sampler> make_sampler(const SamplingOptions& options) {
  validate_sampling_options(options);
  const auto it = sampler_factories().find(options.strategy);
  SPECULA_CHECK(it != sampler_factories().end(), "sampler ", name_of(options.strategy),
                " is a search strategy with its own driver (beam_search), not a token sampler");
  return it->second(options);
}

}  // namespace specula
