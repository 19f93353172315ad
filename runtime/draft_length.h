// defines: CostFit (seconds of a step as a function of its rows, measured at run time: a
// smoothed figure per row count seen, interpolated between them) and DraftLengthChooser, the
// load-adaptive draft length: each step, the chain length (0: a plain step, the root row alone
// and no draft forward) that maximises the step's expected tokens per second, from the
// measured costs of target steps and draft rounds and each speculative sequence's measured
// acceptance — so that it falls back to plain decoding where the rows a draft adds cost more
// than the tokens it is expected to gain.
#pragma once

#include <map>
#include <span>

namespace specula {

class CostFit {
 public:
  // One observation: a step of `rows` rows took `seconds`. Each row count keeps its own
  // exponentially smoothed figure (the newest observation weighs kNewest), so observations
  // at one row count never erase what was measured at others.
  void add(int rows, double seconds);
  // Predicted seconds of `rows` rows: linear between the nearest row counts observed on
  // either side; beyond the observed range, the slope of the two outermost ones (clamped to
  // >= 0); the one figure when a single row count was seen; 0 before any observation.
  double at(double rows) const;
  bool varied() const { return by_rows_.size() >= 2; }  // two or more row counts observed
  bool observed() const { return !by_rows_.empty(); }

  static constexpr double kNewest = 0.25;

 private:
  std::map<int, double> by_rows_;  // row count -> smoothed seconds
};

// Expected tokens of one chain step with acceptance rate `alpha` and `gamma` drafted tokens:
// (1 - alpha^(gamma + 1)) / (1 - alpha) (the bonus token included).
double expected_chain_tokens(double alpha, int gamma);

class DraftLengthChooser {
 public:
  // A decode step of `rows` target rows: its forward and the sampling, verification and
  // commits after it, `seconds` in all.
  void target_forward(int rows, double seconds) { target_.add(rows, seconds); }
  // One draft round (a tree level): a batched draft-model call of `rows` rows (the first
  // round of a proposal also holds the drafters' catch-up rows), or an n-gram round over
  // `rows` sequences.
  void draft_round(int rows, double seconds) { draft_.add(rows, seconds); }

  // The chain length in [0, max_gamma] for every speculative sequence of this step:
  // other_rows / other_tokens: rows and tokens of the step's plain and prefill sequences;
  // alphas: in [speculative sequences], each one's acceptance estimate. The length g
  // maximises (other_tokens + Σ expected_chain_tokens(α_i, g)) / (target.at(other_rows +
  // n (1 + g)) + g · draft.at(n)). Until target steps of two row counts and a draft round
  // have been measured, it alternates 1 and 0, to measure both: γ = 1 is the cheapest probe
  // and enough, since with step costs linear in g and expected tokens concave in g, a chain
  // that loses to plain at g = 1 loses at every g.
  int choose(int other_rows, double other_tokens, std::span<const double> alphas, int max_gamma);

  const CostFit& target_cost() const { return target_; }
  const CostFit& draft_cost() const { return draft_; }

 private:
  CostFit target_, draft_;
  long calls_ = 0;
};

}  // namespace specula
