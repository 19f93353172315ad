// defines: MakeCheckpointCommand, `specula make-checkpoint --out DIR`: a random-weight LLaMA
// checkpoint of a named or given shape (model/checkpoint_writer.h), for speed work at sizes
// the bundled models do not reach.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace specula::cli {

class MakeCheckpointCommand {
 public:
  explicit MakeCheckpointCommand(CLI::App& app);
  bool selected() const { return cmd_->parsed(); }
  int run();

 private:
  CLI::App* cmd_;
  std::string out_;
  std::string preset_ = "tinyllama-1.1b";
  std::string dtype_ = "bf16";
  std::string tokenizer_;
  uint64_t seed_ = 0;
  int hidden_ = 0, ffn_ = 0, heads_ = 0, kv_heads_ = 0, layers_ = 0, vocab_ = 0;
};

}  // namespace specula::cli
