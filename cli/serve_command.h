// defines: ServeCommand, the `specula serve` subcommand: its flags, the server's default
// request settings as config keys (--option KEY=VALUE), and the server's run.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/generate_options.h"
#include "server/http_server.h"

namespace specula::cli {

class ServeCommand {
 public:
  explicit ServeCommand(CLI::App& app);
  bool selected() const { return cmd_->parsed(); }
  int run();

 private:
  CLI::App* cmd_;
  GenerateOptions base_;
  server::ServeOptions serve_;
  std::vector<std::string> options_;  // KEY=VALUE
  int max_batch_ = 16;
};

}  // namespace specula::cli
