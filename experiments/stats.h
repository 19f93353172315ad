// defines: the statistics of experiment summaries — Student-t quantiles, the geometric
// mean of paired ratios with its t-interval, the chain acceptance estimate, and
// Leviathan et al.'s expected tokens per round and predicted speedup.
#pragma once

#include <vector>

namespace specula {

// A point estimate with a confidence interval; low/high are NaN when undefined (n < 2).
struct Interval {
  double estimate;
  double low;
  double high;
};

// The p-quantile of Student's t distribution with `df` >= 1 degrees of freedom.
double student_t_quantile(double p, int df);

// Geometric mean of `ratios` (all > 0) with the two-sided `level` Student-t interval of
// the mean log ratio, exponentiated: exp(m ± t_{n-1} s / sqrt(n)) over the logs.
Interval geometric_mean_interval(const std::vector<double>& ratios, double level = 0.95);

// Maximum-likelihood per-token acceptance α of a chain under the i.i.d. model: every
// round accepts each drafted token with probability α until the first rejection, so
// α = accepted / (accepted + rounds that ended in a rejection).
double chain_acceptance_mle(double accepted, double rejecting_rounds);

// Leviathan et al. (2023): expected tokens per target forward with a chain of γ drafts,
// (1 - α^(γ+1)) / (1 - α) = Σ_{i=0..γ} α^i (the accepted tokens plus the bonus token).
double expected_tokens_per_round(double alpha, int gamma);

// Leviathan et al. (2023), Theorem 3.8: the walltime improvement of speculative decoding,
// (1 - α^(γ+1)) / ((1 - α)(γ c + 1)), with c = time of a draft step / time of a target step.
double leviathan_speedup(double alpha, int gamma, double cost_ratio);

}  // namespace specula
