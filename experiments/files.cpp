#include "experiments/files.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace specula {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  SPECULA_CHECK(in, "cannot read '", path.string(), "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json read_json_if_any(const std::filesystem::path& path) {
  std::ifstream in(path);
  return in ? nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false) : nlohmann::json();
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  SPECULA_CHECK(out, "cannot write '", path.string(), "'");
}

}  // namespace specula
