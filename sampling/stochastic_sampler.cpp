#include "sampling/stochastic_sampler.h"

namespace specula {

StochasticSampler::StochasticSampler(const SamplingOptions& options) : chain_(transform_chain(options)) {}

void StochasticSampler::distribution(std::span<const float> logits, std::span<float> probs) const {
  chain_distribution(chain_, logits, probs);
}

}  // namespace specula
