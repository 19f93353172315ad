#include "experiments/machine.h"

#include <cstdio>
#include <fstream>
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
