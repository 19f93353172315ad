// defines: the `specula` command line: `generate` (one request, text or JSON), `run CONFIG`
// (an experiment), `report DIR` (its tables and plots again), `make-checkpoint` (random
// weights of any LLaMA shape) and `tokenize` (ids of a text or chat prompt).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/generate_command.h"
#include "cli/make_checkpoint_command.h"
#include "cli/run_command.h"
#include "cli/tokenize_command.h"
#include "base/error.h"

int main(int argc, char** argv) {
  CLI::App app{"specula: speculative decoding research framework"};
  app.require_subcommand(1);
  specula::cli::GenerateCommand generate(app);
  specula::cli::RunCommand run(app);
  specula::cli::ReportCommand report(app);
  specula::cli::MakeCheckpointCommand make_checkpoint(app);
  specula::cli::TokenizeCommand tokenize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "specula: error: %s (see --help)\n", e.what());
    return e.get_exit_code();
  }
  try {
    if (generate.selected()) return generate.run();
    if (run.selected()) return run.run();
    if (report.selected()) return report.run();
    if (make_checkpoint.selected()) return make_checkpoint.run();
    if (tokenize.selected()) return tokenize.run();
  } catch (const specula::SpeculaError& e) {
    std::cout.flush();
    std::fprintf(stderr, "specula: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::fprintf(stderr, "specula: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
