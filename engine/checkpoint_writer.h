// defines: write_safetensors (a safetensors file written tensor by tensor, so no more than
// one tensor is in memory) and write_random_checkpoint (a LLaMA checkpoint of any shape in the
// Hugging Face layout with random weights: speed work at real sizes needs no download).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace specula {

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Writes `tensors` back to back after a JSON header padded to 8 bytes. fill(i, bytes) writes
// tensor i's values (bytes.size() = numel * dtype size, little-endian). Errors name the path.
void write_safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                       const std::function<void(std::size_t index, std::span<unsigned char> bytes)>& fill);

// The tensors a LLaMA checkpoint of `shape` holds (Hugging Face names), all in `dtype`.
std::vector<TensorSpec> llama_tensors(const ModelConfig& shape, DType dtype);

// Hugging Face config.json text for `shape` (LlamaForCausalLM).
std::string llama_config_json(const ModelConfig& shape, DType dtype);

// Named shapes: "tinyllama-1.1b" (hidden 2048, 22 layers, 32 heads over 4 KV heads, ffn 5632,
// vocab 32000) and the bundled "target-16m", "draft-4m", "draft-1m". Unknown names are an
// error listing the known ones.
ModelConfig preset_shape(const std::string& name);

struct RandomCheckpoint {
  ModelConfig shape;
  DType dtype = DType::BF16;
  uint64_t seed = 0;
  std::string tokenizer_model;  // copied in; its pieces must fit shape.vocab_size
};

// Writes config.json, model.safetensors and tokenizer.model into `dir` (created if missing).
// Weights are uniform with standard deviation 0.02 (Hugging Face's initializer_range), norms
// are 1; the bytes depend only on (shape, dtype, seed). The shape is validated as config.json
// would be, and a folder that already holds any of the three files is refused (nothing is
// overwritten).
void write_random_checkpoint(const std::string& dir, const RandomCheckpoint& options);

}  // namespace specula
