// defines: read_results() and ResultsWriter, the results.jsonl of an output directory:
// one JSON object per line, appended and flushed line by line, so a crash loses at most
// the line being written — which a rerun drops and redoes. A batched job's line holds
// "requests", each request's object, and its batch summary as "stats". Reading streams:
// each line is parsed, checked and handed on, and none is kept.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace specula {

struct ResultsRead {
  std::uint32_t lines = 0;            // complete, non-blank lines handed on
  std::uintmax_t complete_bytes = 0;  // length of the file up to the last complete line
  bool cut_line = false;              // a last line without its newline (cut by a crash)
};

// Called with each complete line (a checked JSON object) and its ordinal among the lines
// handed on (0, 1, ...), in file order; the object is gone after the call.
using ResultsLineVisitor = std::function<void(const nlohmann::json& line, std::uint32_t ordinal)>;

// Reads `path` (an absent file has no lines) line by line, handing each complete line to
// `visit`; a complete line that is not a JSON object of a results line's shape (key, the
// run's description, prompt_id, seed, repetition, settings, machine, stats) throws
// SpeculaError naming path:line and the field, before `visit` sees it; a JSON type error
// `visit` throws (a field it reads of a shape not checked here) comes out as a SpeculaError
// naming path:line too.
ResultsRead read_results(const std::string& path, const ResultsLineVisitor& visit);

class ResultsWriter {
 public:
  // Cuts `path` to `complete_bytes` (dropping a line cut by a crash) and appends after it.
  ResultsWriter(const std::string& path, std::uintmax_t complete_bytes);
  // Writes `line` and its newline and flushes them to the file.
  void append(const nlohmann::json& line);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace specula
