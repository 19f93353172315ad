// defines: CostFit (seconds of a forward as a linear function of its rows, fitted with
// forgetting) and DraftLengthChooser, the load-adaptive draft length: each step, the chain
// length (0: a plain step, the root row alone and no draft forward) that maximises the step's
// expected tokens per second, from the measured costs of target and draft forwards and each
// speculative sequence's measured acceptance.
#pragma once

#include <span>

namespace specula {

class CostFit {
 public:
  // One observation: a forward of `rows` rows took `seconds`; older ones weigh less.
  void add(double rows, double seconds);
  // Predicted seconds of a forward of `rows` rows (0 before any observation); the slope is
  // clamped to >= 0 and is 0 until rows have varied.
  double at(double rows) const;
  bool varied() const;  // observations at different row counts were seen
  bool observed() const { return w_ > 0; }

 private:
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

// Expected tokens of one chain step with acceptance rate `alpha` and `gamma` drafted tokens:
// (1 - alpha^(gamma + 1)) / (1 - alpha) (the bonus token included).
double expected_chain_tokens(double alpha, int gamma);

class DraftLengthChooser {
 public:
  void target_forward(int rows, double seconds) { target_.add(rows, seconds); }
  void draft_round(int rows, double seconds) { draft_.add(rows, seconds); }

  // The chain length in [0, max_gamma] for every speculative sequence of this step:
  // other_rows / other_tokens: rows and tokens of the step's plain and prefill sequences;
  // alphas: in [speculative sequences], each one's acceptance estimate. Until costs have been
  // seen for target forwards of different row counts and for a draft round, it alternates
  // max_gamma and 0, to measure both.
  int choose(int other_rows, double other_tokens, std::span<const double> alphas, int max_gamma);

 private:
  CostFit target_, draft_;
  long calls_ = 0;
};

}  // namespace specula
