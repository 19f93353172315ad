#include "cli/run_command.h"

#include <iostream>

#include "experiments/engine_backend.h"
#include "experiments/interrupt.h"

namespace specula::cli {
RunCommand::RunCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("run", "Run an experiment config (sweeps, results, tables, plots); reruns resume");
  cmd_->add_option("config", config_path_, "Experiment config (TOML)")->required();
  cmd_->add_option("--out", options_.out_dir, "Output directory (overrides output.directory)");
  cmd_->add_flag("--dry-run", options_.dry_run, "Validate and print the resolved runs; run nothing");
  cmd_->add_flag("--quiet", options_.quiet, "No progress lines");
  cmd_->add_option("--shard", shard_,
                   "I/N: run only shard I of N (0 <= I < N) into OUTPUT/shard-I-of-N; `specula report OUTPUT` joins them");
}

int RunCommand::run() {
  if (!shard_.empty()) options_.shard = parse_shard(shard_);
  EngineBackend backend;
  const InterruptGuard stop_between_jobs;  // Ctrl-C / SIGTERM: finish the job, then exit 130
  return run_experiment(config_path_, backend, options_, std::cout, std::cerr);
}

ReportCommand::ReportCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("report", "Rebuild the summaries and plots of an experiment directory");
  cmd_->add_option("dir", dir_, "Experiment output directory")->required();
}

int ReportCommand::run() { return report_experiment(dir_, std::cout, std::cerr); }

}  // namespace specula::cli
