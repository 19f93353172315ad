// defines: the `specula` command line: `generate` (one request, text or JSON), `run CONFIG`
// (an experiment), `report DIR` (its tables and plots again), `make-checkpoint` (random
// weights of any LLaMA shape), `tokenize` (ids of a text or chat prompt) and `serve` (an
// OpenAI-compatible HTTP server).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/generate_command.h"
#include "cli/make_checkpoint_command.h"
#include "cli/run_command.h"
#include "cli/serve_command.h"
#include "cli/tokenize_command.h"
#include "base/error.h"

namespace {

// OpenMP barriers spin by default (libgomp), and a spinning team whose other core is taken
// by other work stalls, falling far below one thread (docs/architecture.md, Threads).
// libgomp reads OMP_WAIT_POLICY when it is loaded, before main, so unless the user chose
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT set) the program runs itself again once with
// OMP_WAIT_POLICY=passive.
void wait_passively_in_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only if it failed: go on with spinning barriers
}

}  // namespace

int main(int argc, char** argv) {
  wait_passively_in_openmp(argv);
  CLI::App app{"specula: speculative decoding research framework"};
  app.require_subcommand(1);
  specula::cli::GenerateCommand generate(app);
  specula::cli::RunCommand run(app);
  specula::cli::ReportCommand report(app);
  specula::cli::MakeCheckpointCommand make_checkpoint(app);
  specula::cli::TokenizeCommand tokenize(app);
  specula::cli::ServeCommand serve(app);
  // The first argument that is not a flag names the command.
  if (argc > 1 && argv[1][0] != '-' && app.get_subcommands([&](CLI::App* c) { return c->check_name(argv[1]); }).empty()) {
    std::fprintf(stderr, "specula: error: unknown command '%s'\n", argv[1]);
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "specula: error: %s (see --help)\n", e.what());
    return 1;  // every error exits 1 (CLI11's own codes are not part of the interface)
  }
  try {
    if (generate.selected()) return generate.run();
    if (run.selected()) return run.run();
    if (report.selected()) return report.run();
    if (make_checkpoint.selected()) return make_checkpoint.run();
    if (tokenize.selected()) return tokenize.run();
    if (serve.selected()) return serve.run();
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
