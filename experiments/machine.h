// defines: what an output directory and every results line record about where they were
// produced — CPU model, the matrix-product instruction set, compiler and build type,
// specula's version (git describe), the load average — and run_command(), the one way the
// runner starts other programs (git, python3).
#pragma once

#include <array>
#include <string>
#include <vector>

namespace specula {

// "model name" of /proc/cpuinfo, or "unknown".
std::string cpu_model();

// The instruction set the CPU kernels use in this process, by the engine's rule
// (engine/cpu/matmul.cpp): $SPECULA_MATMUL_ISA when set, else "avx512" where /proc/cpuinfo
// lists avx512f, else "avx2".
std::string matmul_isa_name();

// The compiler that built specula ("gcc 12.2.0") and the build type ("Release", with
// "+sanitize" for an ASan/UBSan build).
std::string compiler_name();
std::string build_type();

// The 1, 5 and 15 minute load averages (getloadavg), -1 where unavailable.
std::array<double, 3> load_average();

// `git describe --always --dirty --tags` of the source tree specula was built from, or
// "unknown" when git or the repository is unavailable.
std::string specula_version();

// Runs `argv` (argv[0] looked up on PATH) with stderr merged into stdout; returns its
// exit status (-1 when it could not start) and its output in `output`.
int run_command(const std::vector<std::string>& argv, std::string& output);

}  // namespace specula
