// defines: what an output directory records about where it was produced — CPU model,
// cores, specula's version (git describe) — and run_command(), the one way the runner
// starts other programs (git, python3).
#pragma once

#include <string>
#include <vector>

namespace specula {

// "model name" of /proc/cpuinfo, or "unknown".
std::string cpu_model();

// `git describe --always --dirty --tags` of the source tree specula was built from, or
// "unknown" when git or the repository is unavailable.
std::string specula_version();

// Runs `argv` (argv[0] looked up on PATH) with stderr merged into stdout; returns its
// exit status (-1 when it could not start) and its output in `output`.
int run_command(const std::vector<std::string>& argv, std::string& output);

}  // namespace specula
