// defines: GenerateCommand, the `specula generate` subcommand: its flags, their mapping to
// GenerateOptions, streaming text output and the --json object.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "runtime/generate_options.h"

namespace specula::cli {

class GenerateCommand {
 public:
  explicit GenerateCommand(CLI::App& app);
  bool selected() const { return cmd_->parsed(); }
  int run();

 private:
  CLI::App* cmd_;
  GenerateOptions options_;
  std::string prompt_;
  std::string prompt_ids_;
  std::string prompts_file_;
  int batch_size_ = 1;
  std::string chat_, system_;
  std::string draft_method_;
  std::string sampler_ = "greedy";
  std::string weights_ = "stored";
  std::string draft_weights_ = "stored";
  std::string backend_ = "cpu";
  std::string kv_dtype_;  // "" = the backend's own
  std::string gamma_policy_ = "fixed";
  std::string verify_rule_ = "token";
  int logprobs_ = 0;
  std::string logprobs_source_ = "raw";
  std::string tree_, sequoia_;
  std::string logit_bias_, banned_tokens_;
  bool json_ = false;
};

}  // namespace specula::cli
