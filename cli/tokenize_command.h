// defines: TokenizeCommand, `specula tokenize --model DIR (--text T | --chat USER [--system S])
// [--json]`: the ids (and pieces) of a text or of a chat prompt rendered with the model's
// chat_template, as Hugging Face's encode gives them. DIR needs only the tokenizer files.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace specula::cli {

class TokenizeCommand {
 public:
  explicit TokenizeCommand(CLI::App& app);
  bool selected() const { return cmd_->parsed(); }
  int run();

 private:
  CLI::App* cmd_;
  std::string model_dir_;
  std::string text_;
  std::string chat_;
  std::string system_;
  bool json_ = false;
};

}  // namespace specula::cli
