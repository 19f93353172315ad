// defines: run_experiment() and report_experiment(), the entry points of
// `specula run CONFIG` and `specula report DIR`.
//
// An output directory holds: config.toml (the config as given), config.resolved.toml
// (every default filled in), experiment.json (title, config path, and per session the
// start time, specula's version and the machine), results.jsonl (one line per run,
// prompt, seed and repetition, each with its machine record: CPU, ISA, compiler, build
// type, version, threads, load average), summary.csv, summary.md and the plots (*.png).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "experiments/backend.h"
#include "experiments/shards.h"

namespace specula {

struct RunOptions {
  std::string out_dir;   // replaces output.directory when not empty (relative to the cwd)
  bool dry_run = false;  // validate, print the resolved runs and the jobs left; run nothing
  bool quiet = false;    // no progress lines on `log`
  // Only this shard's jobs, into <output>/shard-I-of-N, and no reports (experiments/shards.h).
  std::optional<Shard> shard;
};

// Loads and validates the config (a bad one throws SpeculaError before anything runs),
// tokenizes the prompts and asks `backend` to validate every run, then runs every job
// that results.jsonl in the output directory does not hold yet — so a rerun resumes —
// appending one flushed line per job (each run's first job of the session after one
// unrecorded warm-up generation), and finally writes the summaries and plots and prints
// the overview tables on `out`. Progress and warnings (speedups above their bound) go to
// `log`. Returns 0, or kInterruptedExit when interrupted() stopped it between two jobs.
int run_experiment(const std::string& config_path, GenerationBackend& backend, const RunOptions& options,
                   std::ostream& out, std::ostream& log);

// Rebuilds summary.csv, summary.md and the plots of `dir` from its results.jsonl and
// prints the overview tables on `out`; where `dir` holds shard directories, joins them into
// its results.jsonl first (join_shards). Returns 0.
int report_experiment(const std::string& dir, std::ostream& out, std::ostream& log);

}  // namespace specula
