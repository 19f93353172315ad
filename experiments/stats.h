// defines: the statistics of experiment summaries — Student-t quantiles, the geometric
// mean of paired ratios with its t-interval, the median, the seeded bootstrap interval of
// a ratio of sums, the chain acceptance estimate, acceptance per depth given the depth
// before and the histogram of accepted tokens per round, Leviathan et al.'s expected
// tokens per round and predicted speedup, and the speedup bound a measured τ allows.
#pragma once

#include <cstdint>
#include <utility>
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

// Fewest (prompt, seed) pairs a speedup or bootstrap interval is given for; fewer print none.
inline constexpr int kMinPairsForInterval = 5;

// The median of `values` (NaN when empty): the middle value, or the mean of the middle two.
double median(std::vector<double> values);

// Percentile bootstrap interval of Σ numerator / Σ denominator over `units` (numerator,
// denominator), resampling the units with replacement `resamples` times from a Mersenne
// Twister seeded with `seed`: the same input gives the same interval on every platform.
// The estimate is the ratio over all units; low/high are NaN with fewer than 2 units.
Interval bootstrap_ratio_interval(const std::vector<std::pair<double, double>>& units, double level = 0.95,
                                  int resamples = 2000, uint64_t seed = 20230518);

// Maximum-likelihood per-token acceptance α of a chain under the i.i.d. model: every
// round accepts each drafted token with probability α until the first rejection, so
// α = accepted / (accepted + rounds that ended in a rejection).
double chain_acceptance_mle(double accepted, double rejecting_rounds);

// From reached[d], the rounds whose accepted path reached depth d + 1, of `rounds` rounds:
// P(accept depth d + 1 | reached depth d) = reached[d] / reached[d - 1] (reached[-1] = rounds;
// NaN where no round reached depth d).
std::vector<double> conditional_acceptance(const std::vector<double>& reached, double rounds);
// ... and the share of rounds that accepted exactly k draft tokens, k = 0 .. reached.size():
// (reached[k - 1] - reached[k]) / rounds, with reached[-1] = rounds and reached[D] = 0.
std::vector<double> accepted_histogram(const std::vector<double>& reached, double rounds);

// Leviathan et al. (2023): expected tokens per target forward with a chain of γ drafts,
// (1 - α^(γ+1)) / (1 - α) = Σ_{i=0..γ} α^i (the accepted tokens plus the bonus token).
double expected_tokens_per_round(double alpha, int gamma);

// Leviathan et al. (2023), Theorem 3.8: the walltime improvement of speculative decoding,
// (1 - α^(γ+1)) / ((1 - α)(γ c + 1)), with c = time of a draft step / time of a target step.
double leviathan_speedup(double alpha, int gamma, double cost_ratio);

// The largest speedup a run emitting `tau` tokens per round can show when every round costs
// at least its drafting plus one target decode step: τ / (1 + draft time per round / target
// step time), with draft_step_ratio = (Σ draft_s / Σ rounds) · the target's decode tokens/s.
// For a chain this is Leviathan's bound τ / (γc + 1) at the measured c; never more than τ.
double speedup_bound(double tau, double draft_step_ratio);

}  // namespace specula
