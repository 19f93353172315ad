// defines: read_results() and ResultsWriter, the results.jsonl of an output directory:
// one JSON object per line, appended and flushed line by line, so a crash loses at most
// the line being written — which a rerun drops and redoes. A batched job's line holds
// "requests", each request's object, and its batch summary as "stats".
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace specula {

struct ResultsRead {
  // What read_results keeps of each line: all of it, or without the generated outputs
  // ("ids", "text", "samples": most of a line), which resuming and the summaries never read.
  enum Fields { kAllFields, kSummaryFields };
  std::vector<nlohmann::json> lines;  // the complete lines, in file order
  std::uintmax_t complete_bytes = 0;  // length of the file up to the last complete line
  bool cut_line = false;              // a last line without its newline (cut by a crash)
};

// Reads `path` (an absent file has no lines) line by line; a complete line that is not a
// JSON object of a results line's shape (key, the run's description, prompt_id, seed,
// repetition, settings, machine, stats) throws SpeculaError naming path:line and the field.
ResultsRead read_results(const std::string& path, ResultsRead::Fields fields = ResultsRead::kAllFields);

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
