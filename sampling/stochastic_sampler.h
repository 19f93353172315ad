// defines: StochasticSampler, the "sample" strategy: Hugging Face's logits warpers in
// Hugging Face's order and semantics — temperature, then top-k, then top-p, then min-p —
// followed by a softmax over the surviving tokens.
//
//   temperature  x = logits / T (T > 0; T = 0 is greedy and never reaches this class).
//   top-k        keep every token whose x is >= the k-th largest x (as HF: ties with the
//                k-th value all survive, so more than k tokens can remain); 0 = off.
//   top-p        order the survivors by x descending, ties by lower token id first; keep
//                a token while the probability mass strictly before it is < p, i.e. the
//                smallest prefix whose mass reaches p (at least one token).  HF's
//                "cumulative ascending mass <= 1 - p is removed" is the same set.  Found by
//                partial selection (bucketing by distance to the top logit, then sorting
//                only the bucket where the mass reaches p): O(vocab) for any nucleus size,
//                never a sort of the whole vocabulary.
//   min-p        keep tokens with probability >= min_p * (top probability); 0 = off.
// Masses are summed in double; logits of -inf are never kept; a NaN or +inf logit (after
// the division), or all logits -inf, is a SpeculaError.
#pragma once

#include "sampling/sampler.h"

namespace specula {

class StochasticSampler final : public Sampler {
 public:
  // Uses temperature (> 0), top_k, top_p and min_p of already validated options.
  explicit StochasticSampler(const SamplingOptions& options);

  // logits: in [vocab]; probs: out [vocab]
  void distribution(std::span<const float> logits, std::span<float> probs) const override;
  bool is_greedy() const override { return false; }

 private:
  float temperature_;
  int top_k_;
  float top_p_;
  float min_p_;
};

}  // namespace specula
