// defines: SummaryDigest — what summarize(), summarize_batches() and the report's notes keep of
// results.jsonl as its lines stream by (SummaryDigest::add, one line at a time): the sums of
// each run × domain folded in file order, and per line only the plain numbers a median or the
// bootstrap needs (Sample: 72 bytes; a batched job's BatchLine: 104 bytes). Memory stays linear
// in the jobs, at those sizes, not at a parsed line's kilobytes.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "experiments/plan.h"

namespace specula {

struct SummaryDigest {
  // The sums over the lines of one group (a run in one domain, or in all of them), in file
  // order, as summarize() reads them; "rounds" are stats.steps.
  struct Group {
    nlohmann::json settings;  // the first line's settings (a run's canonical settings)
    int lines = 0;
    double drafted = 0, accepted = 0, rounds = 0, tau_sum = 0;  // tau_sum: Σ mean_accepted_tokens · rounds
    double full_rounds = 0;   // rounds whose accepted path reached depth γ
    double draft_s = 0, verify_s = 0, sample_s = 0, commit_s = 0;  // stats.time_breakdown
    double decode_time = 0;   // Σ stats.decode_s of the lines with a time_breakdown
    double cpu_s = 0, thread_wall_s = 0;  // Σ machine.cpu_s, Σ machine.wall_s · threads
    std::vector<double> reached;           // [d]: rounds whose accepted path reached depth d + 1
  };
  // A run of single-request lines: its description (from its first line) and its groups.
  struct Run {
    RunInfo info;
    Group all;
    std::map<std::uint32_t, Group> by_domain;  // domain index -> its lines' group
  };
  // One single-request line: what the per-(prompt, seed) medians and bootstrap units need.
  struct Sample {
    std::uint32_t run;      // index into runs
    std::uint32_t domain;   // index into domains
    std::uint32_t prompt;   // index into prompts
    std::uint32_t ordinal;  // the line's ordinal (add's): suspect jobs are named through it
    std::uint64_t seed;
    double decode_tokens_per_s;  // stats.decode_tokens_per_s
    double e2e_tokens_per_s;     // new_tokens / time_s (0 without time_s)
    double accepted, drafted, tau_rounds, rounds;  // the unit's sums, this line's share
  };
  // A batched run: its description, batch size and request rate, and requests per job (of
  // its first line).
  struct BatchRun {
    RunInfo info;
    int batch_size = 0;
    double request_rate = 0;
    int requests = 0;
  };
  // One batched job: the figures of its batch summary (NaN where absent) the medians read.
  struct BatchLine {
    enum Figure { kThroughput, kItlMean, kItlP50, kItlP99, kTtftP50, kTtftP99, kLatencyP50, kLatencyP99,
                  kOccupancy, kRowsPerForward, kFigures };
    std::uint32_t run;  // index into batch_runs
    int repetition;
    std::uint64_t seed;
    double figures[kFigures];
  };

  // Folds one results line (as read_results checked it; `ordinal` as it numbers them) in.
  void add(const nlohmann::json& line, std::uint32_t ordinal);

  std::uint64_t lines = 0;              // every line added, batched ones included
  std::set<std::string> versions;       // machine.version of each line ("unknown" when absent)
  std::vector<std::string> prompts;     // prompt ids, in order of first appearance
  std::vector<std::string> domains;     // domains, in order of first appearance
  std::vector<int> domain_first_prompt; // [domain]: the least prompt_index of its lines
  std::vector<Run> runs;                // runs of single-request lines, in order of first appearance
  std::map<std::string, std::uint32_t> run_of;  // run id -> index into runs
  std::deque<Sample> samples;           // single-request lines, in file order
  std::vector<BatchRun> batch_runs;     // batched runs, in order of first appearance
  std::map<std::string, std::uint32_t> batch_run_of;  // run id -> index into batch_runs
  std::deque<BatchLine> batch_lines;    // batched lines, in file order

 private:
  std::map<std::string, std::uint32_t> prompt_of_, domain_of_;
};

// The digest of lines held in memory (their ordinals: their positions).
SummaryDigest digest_of(const std::vector<nlohmann::json>& lines);

}  // namespace specula
