// defines: RunCommand and ReportCommand, the `specula run CONFIG` and `specula report DIR`
// subcommands over the experiment runner, with EngineBackend, the runner's seam to the
// real engine (runtime/generate.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "experiments/runner.h"

namespace specula::cli {

class RunCommand {
 public:
  explicit RunCommand(CLI::App& app);
  bool selected() const { return cmd_->parsed(); }
  int run();

 private:
  CLI::App* cmd_;
  std::string config_path_, shard_;
  RunOptions options_;
};

class ReportCommand {
 public:
  explicit ReportCommand(CLI::App& app);
  bool selected() const { return cmd_->parsed(); }
  int run();

 private:
  CLI::App* cmd_;
  std::string dir_;
};

}  // namespace specula::cli
