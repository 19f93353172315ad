#include "experiments/machine.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace specula {
namespace {

std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("model name")) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  return "unknown";
}

std::string matmul_isa_name() {
  if (const char* forced = std::getenv("SPECULA_MATMUL_ISA"); forced != nullptr && *forced != '\0') return forced;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("flags")) continue;
    std::istringstream flags(line.substr(line.find(':') + 1));
    for (std::string flag; flags >> flag;) {
      if (flag == "avx512f") return "avx512";
    }
    break;
  }
  return "avx2";
}

std::string compiler_name() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

std::string build_type() {
  const std::string type = SPECULA_BUILD_TYPE[0] != '\0' ? SPECULA_BUILD_TYPE : "unspecified";
#if defined(SPECULA_SANITIZE_BUILD)
  return type + "+sanitize";
#else
  return type;
#endif
}

std::array<double, 3> load_average() {
  std::array<double, 3> load = {-1, -1, -1};
  if (getloadavg(load.data(), 3) != 3) load = {-1, -1, -1};
  return load;
}

std::string specula_version() {
  std::string output;
  if (run_command({"git", "-C", SPECULA_SOURCE_DIR, "describe", "--always", "--dirty", "--tags"}, output) != 0) {
    return "unknown";
  }
  while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
  return output.empty() ? "unknown" : output;
}

int run_command(const std::vector<std::string>& argv, std::string& output) {
  std::string command;
  for (const std::string& a : argv) command += shell_quote(a) + " ";
  output.clear();
  FILE* pipe = popen((command + "2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace specula
