#include "sampling/greedy_sampler.h"

#include <algorithm>
#include <cassert>

namespace specula {

void GreedySampler::distribution(std::span<const float> logits, std::span<float> probs) const {
  assert(probs.size() == logits.size());
  std::fill(probs.begin(), probs.end(), 0.0f);
  probs[greedy_token(logits)] = 1.0f;
}

}  // namespace specula
