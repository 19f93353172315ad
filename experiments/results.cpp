#include "experiments/results.h"

#include <filesystem>
#include <sstream>

#include "base/error.h"

namespace specula {

ResultsRead read_results(const std::string& path) {
  ResultsRead read;
  std::ifstream in(path, std::ios::binary);
  if (!in) return read;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::size_t start = 0;
  for (int number = 1; start < text.size(); ++number) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      read.cut_line = true;
      break;
    }
    const std::string_view line(text.data() + start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      SPECULA_CHECK(j.is_object(), path, ":", number, ": not a JSON object (a corrupt results file)");
      read.lines.push_back(std::move(j));
    }
    start = end + 1;
    read.complete_bytes = start;
  }
  return read;
}

ResultsWriter::ResultsWriter(const std::string& path, std::uintmax_t complete_bytes) : path_(path) {
  if (std::filesystem::exists(path)) std::filesystem::resize_file(path, complete_bytes);
  out_.open(path, std::ios::binary | std::ios::app);
  SPECULA_CHECK(out_, "cannot open '", path, "' for writing");
}

void ResultsWriter::append(const nlohmann::json& line) {
  out_ << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
  SPECULA_CHECK(out_, "writing '", path_, "' failed");
}

}  // namespace specula
