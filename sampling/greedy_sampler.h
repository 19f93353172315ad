// defines: GreedySampler, the deterministic strategy: the one-hot distribution on the
// argmax (ties go to the lowest token id).
#pragma once

#include "sampling/sampler.h"

namespace specula {

class GreedySampler final : public Sampler {
 public:
  // logits: in [vocab]; probs: out [vocab], 1 at argmax(logits), 0 elsewhere
  void distribution(std::span<const float> logits, std::span<float> probs) const override;
  bool is_greedy() const override { return true; }
};

}  // namespace specula
