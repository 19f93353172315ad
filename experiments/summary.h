// defines: RunSummary and summarize() — per run and domain, from results.jsonl lines
// alone (streamed through a SummaryDigest): acceptance and τ with bootstrap intervals, acceptance per depth (cumulative and
// given the depth before), the histogram of accepted tokens per round, tokens/s, the
// decode-only and end-to-end speedups over the target-alone baseline with their intervals,
// Leviathan et al.'s predicted speedup and the one from the measured costs of drafting and
// verifying, the sanity bound τ and c allow (and the jobs of a
// cell above it), the time breakdown — and the writers of summary.csv, summary.md and the
// terminal tables and warnings.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/plan.h"
#include "experiments/stats.h"
#include "experiments/summary_digest.h"

namespace specula {

// NaN marks a figure that does not apply (no drafts, no baseline, not a chain). Sums
// run over the lines of the group; "rounds" are the verification steps (stats.steps); a
// pair is one (prompt, seed), whose repetitions are reduced to their median.
struct RunSummary {
  RunInfo run;
  nlohmann::json settings;              // the run's canonical settings (target, sampling, ...)
  std::string domain;                   // a prompt domain, or "all"
  int lines = 0;                        // results lines (repetitions included)
  int units = 0;                        // (prompt, seed) pairs of this run: the bootstrap's units
  int pairs = 0;                        // (prompt, seed) pairs the baseline measured too
  double acceptance_rate = 0;           // Σ accepted / Σ drafted
  Interval acceptance_interval{};       //   its bootstrap interval over the units
  double alpha = 0;                     // chains: chain_acceptance_mle(Σ accepted, Σ rounds
                                        //   - Σ rounds that accepted all γ)
  double tau = 0;                       // Σ mean_accepted_tokens·rounds / Σ rounds
  Interval tau_interval{};              //   its bootstrap interval over the units
  std::vector<double> depth_acceptance; // Σ rounds reaching depth d + 1 / Σ rounds
  std::vector<double> depth_conditional;// Σ rounds reaching depth d + 1 / Σ rounds reaching d
  std::vector<double> accepted_histogram;  // [k]: share of rounds accepting exactly k tokens
  double tokens_per_s = 0;              // mean over the units of the median decode tokens/s
  double e2e_tokens_per_s = 0;          // the same of new_tokens / time_s (prefill included)
  double baseline_tokens_per_s = 0;     // mean over the pairs of the baseline's decode tokens/s
  Interval speedup{};                   // decode only, per pair: median tokens/s over
                                        // repetitions / the baseline's; geometric mean, 95%
                                        // t-interval (shown from kMinPairsForInterval pairs)
  Interval e2e_speedup{};               // the same of end-to-end tokens/s (new_tokens / time_s:
                                        // prefill of target and draft included)
  double cost_ratio = 0;                // c: (Σ draft_s / Σ drafted) · baseline_tokens_per_s,
                                        //   a draft token's time over a target decode step's
  double predicted_speedup = 0;         // chains: leviathan_speedup(alpha, γ, cost_ratio)
  double verify_cost = 0;               // v: (Σ verify_forward_s / Σ rounds) · baseline_tokens_per_s,
                                        //   a verify pass's time over a target decode step's
  double cost_predicted_speedup = 0;    // τ / ((Σ draft_s + Σ verify_forward_s) / Σ rounds ·
                                        //   baseline tok/s): the measured acceptance at the
                                        //   measured costs of a round's drafting and verify pass
  double bound = 0;                     // speedup_bound(τ, Σ draft_s / Σ rounds · baseline tok/s)
  std::vector<std::uint32_t> suspect_lines;  // when the decode speedup exceeds `bound`: the lines
                                             // (ordinals) of the pairs (both runs) whose own ratio
                                             // exceeds it
  std::vector<std::string> suspect_jobs;     // their keys, in the same order (name_suspect_jobs)
  double cpu_share = 0;                 // Σ machine.cpu_s / Σ (machine.wall_s · machine.threads):
                                        //   the share of the jobs' time their threads had a CPU
                                        //   (1 with one thread on a core of its own; NaN when absent)
  double draft_share = 0;               // Σ time_breakdown.draft_s / Σ stats.decode_s (prefill
                                        //   left out), etc., over the lines that have a
                                        //   time_breakdown
  double verify_share = 0;
  double sample_share = 0;
  double commit_share = 0;

  bool interval_shown() const { return pairs >= kMinPairsForInterval; }
  bool above_bound() const { return !suspect_lines.empty(); }
};

// One summary per run (in run order) and domain ("all" first, then domains in prompt order),
// from the digest's single-request lines; suspect_jobs is left empty (the digest keeps no keys).
std::vector<RunSummary> summarize(const SummaryDigest& digest);
// Fills each summary's suspect_jobs with key_of(line) of its suspect_lines.
void name_suspect_jobs(std::vector<RunSummary>& summaries, const std::function<std::string(std::uint32_t)>& key_of);
// The summaries of lines held in memory (batched lines left out), suspect jobs named.
std::vector<RunSummary> summarize(const std::vector<nlohmann::json>& lines);

// summary.csv: one row per summary; the sweep axes ("sweep.<key>", value labels),
// acc_depth_1..K, cond_depth_1..K and accepted_0..K as columns too.
void write_summary_csv(const std::vector<RunSummary>& summaries, std::ostream& out);
// summary.md: overview, per domain, acceptance per depth, accepted tokens per round, the
// sampler comparison, the cells above their bound, definitions. `header` (Markdown)
// follows the title.
void write_summary_markdown(const std::vector<RunSummary>& summaries, const std::string& title,
                            const std::string& header, std::ostream& out);
// What the terminal shows at the end: the overview, and the sampler comparison if any.
std::string terminal_tables(const std::vector<RunSummary>& summaries);
// `v` printed with the printf `spec`, or `missing` when it is not finite.
std::string format(double v, const char* spec, const char* missing = "—");
// A Markdown table (columns padded to their widest cell).
std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
// One "warning: ..." line per cell whose decode speedup exceeds its bound, with its job keys.
std::string sanity_warnings(const std::vector<RunSummary>& summaries);

}  // namespace specula
