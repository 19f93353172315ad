// defines: StochasticSampler, the "sample" strategy: the distribution of the transform chain
// its options ask for (sampling/logit_transforms.h: temperature, top-k, top-p, min-p in
// Hugging Face's order, then a softmax over the surviving tokens).
#pragma once

#include <vector>

#include "sampling/logit_transforms.h"
#include "sampling/sampler.h"

namespace specula {

class StochasticSampler final : public Sampler {
 public:
  // Of already validated options with temperature > 0 (T = 0 is greedy and never reaches
  // this class).
  explicit StochasticSampler(const SamplingOptions& options);

  // logits: in [vocab]; probs: out [vocab]
  void distribution(std::span<const float> logits, std::span<float> probs) const override;
  bool is_greedy() const override { return false; }

 private:
  std::vector<LogitTransform> chain_;
};

}  // namespace specula
