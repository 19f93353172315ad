// defines: NgramConfig and NgramProposer, the model-free prompt-lookup drafter: find the
// most recent earlier occurrence of the context's last n tokens (n from n_max down to
// n_min) and propose the tokens that followed it.
//
// Proposals are deterministic, so the chain is marked SiblingDraw::kTopK: for stochastic
// verification each proposed token is a point-mass proposal (q = the one-hot of that
// token), which the verifier handles without reading any q row (pass q empty).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "verify/token_tree.h"

namespace specula {

struct NgramConfig {
  int n_min = 1;  // --ngram-min: shortest suffix worth matching
  int n_max = 3;  // --ngram-max: longest suffix tried first
  int gamma = 4;  // --gamma: most tokens proposed per step
};

class NgramProposer {
 public:
  // Throws SpeculaError unless 1 <= n_min <= n_max and gamma >= 1.
  explicit NgramProposer(NgramConfig config);

  // Appends committed tokens (prompt, then each step's output) to the context. Costs
  // O(sum of n over [n_min, n_max]) per token: the index is updated, never rebuilt.
  void append(std::span<const int> tokens);
  void reset();
  std::span<const int> context() const { return context_; }

  // A chain of up to gamma tokens: those after the most recent earlier occurrence of the
  // longest matching suffix. When that occurrence ends within gamma tokens of the end, the
  // continuation runs into the suffix itself and repeats with that period (a loop in the
  // context predicts more of the loop). An empty tree when no n-gram matches.
  TokenTree propose() const;

 private:
  uint64_t hash(int end, int n) const;  // of context_[end - n + 1 .. end]

  NgramConfig config_;
  std::vector<int> context_;
  // [n_max - n_min + 1] maps: n-gram hash -> the last index e it ends at, e < length - 1
  // (so that at least one token follows it).
  std::vector<std::unordered_map<uint64_t, int>> last_end_;
};

}  // namespace specula
