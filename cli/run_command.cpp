#include "cli/run_command.h"

#include <iostream>

#include "cli/batch_generate.h"
#include "experiments/interrupt.h"
#include "runtime/batch_run.h"
#include "runtime/generate.h"

namespace specula::cli {
namespace {

class EngineBackend : public GenerationBackend {
 public:
  std::vector<int> tokenize(const std::string& model_dir, const Prompt& prompt) override {
    return prompt_token_ids(models_, model_dir, prompt);
  }
  void validate(const GenerateOptions& options, const OptionNames& names) override {
    validate_generate_options(models_, options, names);
  }
  nlohmann::json generate(const GenerateOptions& options) override { return specula::generate(models_, options); }
  nlohmann::json generate_batch(const std::vector<GenerateOptions>& requests, int batch_size,
                                const std::vector<double>& arrivals_s) override {
    const BatchRun run = run_requests(models_, requests, batch_size, arrivals_s);
    return {{"results", run.results}, {"summary", run.summary}};
  }
  std::string device_name() override { return accelerator_name(); }
  int threads(const GenerateOptions& options) override { return request_threads(options); }

 private:
  ModelStore models_;
};

}  // namespace

RunCommand::RunCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("run", "Run an experiment config (sweeps, results, tables, plots); reruns resume");
  cmd_->add_option("config", config_path_, "Experiment config (TOML)")->required();
  cmd_->add_option("--out", options_.out_dir, "Output directory (overrides output.directory)");
  cmd_->add_flag("--dry-run", options_.dry_run, "Validate and print the resolved runs; run nothing");
  cmd_->add_flag("--quiet", options_.quiet, "No progress lines");
}

int RunCommand::run() {
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
