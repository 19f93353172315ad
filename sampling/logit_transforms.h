// defines: the transforms of the "sample" strategy, Hugging Face's logits warpers as small
// steps that each narrow one row's candidate tokens (Temperature, TopK, TopP, MinP, one
// LogitTransform), transform_chain (the chain SamplingOptions ask for, in Hugging Face's
// order: temperature, then top-k, then top-p, then min-p) and chain_distribution (a chain's
// exact distribution: the softmax over the candidates it leaves).
//
//   temperature  x = x / T (T > 0).
//   top-k        keep every candidate whose x is >= the k-th largest x (as HF: ties with
//                the k-th value all survive, so more than k tokens can remain).
//   top-p        order the candidates by x descending, ties by lower token id first; keep
//                a token while the probability mass strictly before it is < p, i.e. the
//                smallest prefix whose mass reaches p (at least one token).  HF's
//                "cumulative ascending mass <= 1 - p is removed" is the same set.  Found by
//                partial selection (bucketing by distance to the top logit, then sorting
//                only the bucket where the mass reaches p): O(vocab) for any nucleus size,
//                never a sort of the whole vocabulary.
//   min-p        keep candidates with probability >= p * (top probability).
// Temperature and top-k read the scores x (the logits as the transforms before them left
// them); top-p and min-p read the candidates' probabilities, the softmax numerators
// exp(x - max x) summed in double.  Each transform keeps the top token.  Logits of -inf are
// never kept; a NaN or +inf score after Temperature, or all logits -inf, is a SpeculaError.
#pragma once

#include <span>
#include <variant>
#include <vector>

#include "sampling/sampling_options.h"

namespace specula {

struct Candidates;  // one row as the transforms narrow it (logit_transforms.cpp)

// Divides the scores by t > 0; refuses a NaN or +inf result, naming the temperature when a
// finite logit overflows.
struct Temperature {
  float t;
  void apply(Candidates& row) const;
};

// The k >= 1 largest scores and every candidate tied with the k-th.
struct TopK {
  int k;
  void apply(Candidates& row) const;
};

// The smallest prefix, in candidate order, whose probability mass reaches p in (0, 1].
struct TopP {
  float p;
  void apply(Candidates& row) const;
};

// Probabilities >= p times the top one, p in [0, 1].
struct MinP {
  float p;
  void apply(Candidates& row) const;
};

using LogitTransform = std::variant<Temperature, TopK, TopP, MinP>;

// The chain of already validated options with temperature > 0, in Hugging Face's order:
// Temperature always (T = 1 divides exactly, and Temperature refuses NaN and +inf), then
// TopK when top_k > 0, TopP when top_p < 1, MinP when min_p > 0.
std::vector<LogitTransform> transform_chain(const SamplingOptions& options);

// Applies `chain` in order to `logits` and writes the softmax over the candidates left:
// zeros outside them, sums to 1 (up to float rounding).  Safe to call from several threads
// at once; allocation-free after warm-up (per-thread scratch rows).
//   logits: in [vocab], vocab >= 1; probs: out [vocab] (must not alias logits)
void chain_distribution(std::span<const LogitTransform> chain, std::span<const float> logits, std::span<float> probs);

}  // namespace specula
