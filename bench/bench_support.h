// defines: real_prompt, the prompt ids the engine benchmarks decode after (bench_engine,
// bench_kv): real text from the reference prompts, not noise.
#pragma once

#include <cstddef>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace specula {

// The first `n` ids of target-16m's reference prompts, concatenated and repeated as needed
// (every bundled model shares its tokenizer).
inline std::vector<int> real_prompt(std::size_t n) {
  std::ifstream in(std::string(SPECULA_SOURCE_DIR) + "/tests/data/hf-greedy.json");
  const auto refs = nlohmann::json::parse(in).at("models").at("target-16m");
  std::vector<int> ids;
  while (ids.size() < n)
    for (const auto& r : refs)
      for (int id : r.at("prompt_ids").get<std::vector<int>>()) ids.push_back(id);
  ids.resize(n);
  return ids;
}

}  // namespace specula
