// defines: RunSummary and summarize() — per run and domain, from results.jsonl lines
// alone: acceptance, τ, acceptance per depth, tokens/s, speedup over the target-alone
// baseline with its confidence interval, Leviathan et al.'s predicted speedup, the time
// breakdown — and the writers of summary.csv, summary.md and the terminal tables.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/plan.h"
#include "experiments/stats.h"

namespace specula {

// NaN marks a figure that does not apply (no drafts, no baseline, not a chain). Sums
// run over the lines of the group; "rounds" are the verification steps (stats.steps).
struct RunSummary {
  RunInfo run;
  std::string domain;                   // a prompt domain, or "all"
  int lines = 0;                        // results lines (repetitions included)
  int pairs = 0;                        // (prompt, seed) pairs the baseline measured too
  double acceptance_rate = 0;           // Σ accepted / Σ drafted
  double alpha = 0;                     // chains: chain_acceptance_mle(Σ accepted, Σ rounds
                                        //   - Σ rounds that accepted all γ)
  double tau = 0;                       // Σ mean_accepted_tokens·rounds / Σ rounds
  std::vector<double> depth_acceptance; // Σ rounds reaching depth d + 1 / Σ rounds
  double tokens_per_s = 0;              // mean decode_tokens_per_s over the lines
  double baseline_tokens_per_s = 0;     // mean over the pairs of the baseline's tokens/s
  Interval speedup{};                   // per pair: mean tokens/s over repetitions / the
                                        // baseline's; geometric mean, 95% t-interval
  double cost_ratio = 0;                // c: (Σ draft_s / Σ drafted) · baseline_tokens_per_s,
                                        //   a draft token's time over a target decode step's
  double predicted_speedup = 0;         // chains: leviathan_speedup(alpha, γ, cost_ratio)
  double draft_share = 0;               // Σ time_breakdown.draft_s / Σ decode time (new_tokens /
                                        //   decode_tokens_per_s: prefill left out), etc., over
                                        //   the lines that have a time_breakdown
  double verify_share = 0;
  double sample_share = 0;
  double commit_share = 0;
};

// One summary per run (in run order) and domain ("all" first, then domains in prompt order).
std::vector<RunSummary> summarize(const std::vector<nlohmann::json>& lines);

// summary.csv: one row per summary; the sweep axes ("sweep.<key>", value labels) and
// acc_depth_1..K as columns too.
void write_summary_csv(const std::vector<RunSummary>& summaries, std::ostream& out);
// summary.md: overview, per domain, acceptance per depth, sampler comparison, definitions.
// `header` (Markdown) follows the title.
void write_summary_markdown(const std::vector<RunSummary>& summaries, const std::string& title,
                            const std::string& header, std::ostream& out);
// What the terminal shows at the end: the overview, and the sampler comparison if any.
std::string terminal_tables(const std::vector<RunSummary>& summaries);

}  // namespace specula
