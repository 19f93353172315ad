// defines: BatchSummary and summarize_batches() — per batched run (run.batch_size >= 1), from
// its results lines alone (streamed through a SummaryDigest): output throughput, per-token latency (mean inter-token gap), TTFT,
// inter-token and end-to-end latency percentiles, mean occupancy, rows per target forward, and
// the throughput speedup over plain decoding at the same batch size — and the writers of
// batch_summary.csv and of the batch-size tables in summary.md and on the terminal.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/plan.h"
#include "experiments/stats.h"
#include "experiments/summary_digest.h"

namespace specula {

// Figures are medians over the run's lines (one per seed and repetition) of each line's batch
// summary; NaN marks one that does not apply (no baseline).
struct BatchSummary {
  RunInfo run;
  std::string series;          // the label without its " · batch N": one line of the plots
  int batch_size = 0;          // settings.batch_size
  double request_rate = 0;     // settings.request_rate (0: all at once)
  int lines = 0;
  int requests = 0;            // of one line
  double tokens_per_s = 0;     // output throughput: new tokens of all requests / the job's wall time
  double ms_per_token = 0;     // mean inter-token latency over every request's tokens
  double itl_p50_ms = 0, itl_p99_ms = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double latency_p50_s = 0, latency_p99_s = 0;  // end to end, from arrival to the last token
  double occupancy = 0;        // mean sequences per target forward
  double rows_per_forward = 0;
  double baseline_tokens_per_s = NAN;  // the plain run at the same batch size
  Interval speedup{NAN, NAN, NAN};     // throughput over the baseline's, per (seed, repetition) pair:
                                       // geometric mean, 95% t-interval from kMinPairsForInterval pairs
  int pairs = 0;
};

// The digest's batched jobs (lines with "requests"), one summary per run in run order.
std::vector<BatchSummary> summarize_batches(const SummaryDigest& digest);

// batch_summary.csv: one row per batched run.
void write_batch_csv(const std::vector<BatchSummary>& summaries, std::ostream& out);
// The Markdown section of summary.md: the batch-size table (runs as rows, batch sizes as
// columns: tok/s · ms/token · speedup) per request rate, then every figure of every run.
std::string batch_markdown(const std::vector<BatchSummary>& summaries);
// The batch-size table alone, for the terminal.
std::string batch_terminal_table(const std::vector<BatchSummary>& summaries);

}  // namespace specula
