// Fuzz target: a results.jsonl as resuming and `specula report` read it: read_results streaming
// into a SummaryDigest, then the summaries and their CSV and Markdown tables. Seeds: fuzz/seeds/results.jsonl (lines of
// a real run of configs/quickstart.toml's shape).
#include <sstream>

#include "experiments/results.h"
#include "experiments/summary.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = specula::fuzz::input_file("results.jsonl", data, size);
  FUZZ_PARSER({
    specula::SummaryDigest digest;
    specula::read_results(path, [&](const nlohmann::json& line, std::uint32_t ordinal) { digest.add(line, ordinal); });
    const std::vector<specula::RunSummary> summaries = specula::summarize(digest);
    std::ostringstream out;
    specula::write_summary_csv(summaries, out);
    specula::write_summary_markdown(summaries, "fuzz", "", out);
  });
  return 0;
}
