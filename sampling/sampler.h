// defines: Sampler (a decoding strategy split into the exact distribution it samples from
// and one inverse-CDF draw), the name -> factory table behind make_sampler, and
// validate_sampling_options (errors name the option through OptionNames), plus the argmax / inverse_cdf
// primitives every strategy shares.
//
// The split matters for speculative decoding: the verifier must see the very distribution
// a strategy draws from, and lossless verification applies the same Sampler to target and
// draft logits.
#pragma once

#include <map>
#include <memory>
#include <span>

#include "sampling/sampling_options.h"
#include "base/option_names.h"
#include "base/rng.h"

namespace specula {

class Sampler {
 public:
  virtual ~Sampler() = default;

  // The exact distribution the strategy samples from: zeros outside the kept set, sums to
  // 1 (up to float rounding).  Safe to call from several threads at once.
  //   logits: in [vocab]; probs: out [vocab] (must not alias logits)
  virtual void distribution(std::span<const float> logits, std::span<float> probs) const = 0;

  // True when distribution() is always one-hot (greedy); draws then need no randomness.
  virtual bool is_greedy() const = 0;

  // One token from `probs` by inverse CDF; consumes exactly one uniform of `rng`, whatever
  // the strategy, so a stream's position depends only on how many tokens were drawn.
  //   probs: in [vocab], non-negative, not all zero
  int draw(std::span<const float> probs, Philox& rng) const;
};

// Index of the largest value; ties go to the lowest index; NaNs are ignored.
//   values: in [n], n >= 1
int argmax(std::span<const float> values);

// argmax of a row of logits for greedy decoding, which refuses NaN and +inf logits as the
// sampling transforms do (SpeculaError "sampler: logit i is nan"): a model computing NaN
// must not emit token 0 forever.
//   logits: in [vocab], vocab >= 1
int greedy_token(std::span<const float> logits);

// Smallest i with probs[i] > 0 and probs[0] + ... + probs[i] > u * sum(probs) (sums in
// double, in a fixed order); the last positive index if rounding leaves none; never a
// zero-probability index.
//   probs: in [n], non-negative, not all zero; u in [0, 1)
int inverse_cdf(std::span<const float> probs, double u);

// Throws SpeculaError naming the option (through `names`; keys sampling.*) for any
// out-of-range field: temperature >= 0 and finite, top_k >= 0, top_p in (0, 1], min_p in
// [0, 1], beam_width >= 1, length_penalty finite.
void validate_sampling_options(const SamplingOptions& options, const OptionNames& names = {});

// The token samplers by strategy: greedy, and sample (temperature, top-k, top-p, min-p;
// temperature 0 gives greedy).  Beam search is a search strategy with its own driver
// (sampling/beam_search.h), so it has no entry here.
using SamplerFactory = std::unique_ptr<Sampler> (*)(const SamplingOptions&);
const std::map<Strategy, SamplerFactory>& sampler_factories();

// Validates `options`, then builds the sampler for options.strategy.
std::unique_ptr<Sampler> make_sampler(const SamplingOptions& options);

}  // namespace specula
