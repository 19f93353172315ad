#include "sampling/greedy_sampler.h"

#include <algorithm>
#include <cassert>

namespace specula {

void GreedySampler::distribution(std::span<const float> logits, std::span<float> probs) const {
  assert(probs.size() == logits.size());
  std::fill(probs.begin(), probs.end(), 0.0f);
  probs[argmax(logits)] = 1.0f;
}

}  // namespace specula
