// defines: real_prompt, the prompt ids the engine benchmarks decode after (bench_engine,
// bench_kv): real text from the reference prompts, not noise; and BenchModel, a model folder
// on the CPU backend (matrices as stored or in another format) with one workspace, forwarding
// one sequence at a time or many.
#pragma once

#include <cstddef>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"

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

struct BenchModel {
  // `weights`: the format the matrices are read in (engine/matrix_format.h); nullopt = as stored.
  explicit BenchModel(const std::string& dir, std::optional<MatrixFormat> weights = std::nullopt)
      : model(std::make_unique<Model>(dir)),
        backend(make_backend(BackendKind::kCpu, *model, weights)),
        workspace(backend->make_workspace()) {}

  const ModelConfig& config() const { return model->config(); }
  KvLayout kv_layout(int block_size) const { return model->kv_layout(block_size); }
  // One sequence's rows.  logits: out [n (kAll) or 1 (kLast), vocab]
  void forward(KvCache& cache, int seq, std::span<const int> tokens, std::span<const int> positions, RowLogits rows,
               std::span<float> logits) {
    ForwardContext{*backend, cache, *workspace}.run(SequenceRows{seq, tokens, positions, {}, rows}, logits);
  }

  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Workspace> workspace;
};

}  // namespace specula
