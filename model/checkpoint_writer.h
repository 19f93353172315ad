// defines: write_safetensors (a safetensors file written tensor by tensor, so no more than
// one tensor is in memory) and write_random_checkpoint (a LLaMA, Mistral, Qwen2 or Qwen3
// checkpoint of any shape in the Hugging Face layout with random weights: tests of every
// family and speed work at real sizes need no download).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"

namespace specula {

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  // Set: an integer or boolean tensor of that type (dtype unused).
  std::optional<IndexTensorView::Type> index = std::nullopt;
};

// Writes `tensors` back to back after a JSON header padded to 8 bytes. fill(i, bytes) writes
// tensor i's values (bytes.size() = numel * element size, little-endian). Errors name the path.
void write_safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                       const std::function<void(std::size_t index, std::span<unsigned char> bytes)>& fill);

// The tensors a checkpoint of `shape` holds (Hugging Face names, its family's biases and
// norms included), all in `dtype`.
std::vector<TensorSpec> checkpoint_tensors(const ModelConfig& shape, DType dtype);

// Hugging Face config.json text for `shape` (its family's model_type, architecture and keys).
std::string checkpoint_config_json(const ModelConfig& shape, DType dtype);

// Named shapes: "tinyllama-1.1b" (hidden 2048, 22 layers, 32 heads over 4 KV heads, ffn 5632,
// vocab 32000), the bundled "target-16m", "draft-4m", "draft-1m"; one small test shape per
// family with every feature it adds switched on: "llama3" (llama3 RoPE scaling, head_dim 32 x
// 4 heads over hidden 64, attention and MLP biases), "qwen2" (q/k/v biases), "qwen3" (q/k
// norms, head_dim 32 x 4 heads over hidden 64), "mistral" (sliding window 4); and the real
// shapes "llama3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b". Unknown names are an error listing the
// known ones.
ModelConfig preset_shape(const std::string& name);

struct RandomCheckpoint {
  ModelConfig shape;
  DType dtype = DType::BF16;
  uint64_t seed = 0;
  std::string tokenizer_model;  // copied in; its pieces must fit shape.vocab_size
  float weight_std = 0.02f;     // of every matrix and bias (norms are 1)
};

// Writes config.json, model.safetensors and tokenizer.model into `dir` (created if missing).
// Weights and biases are uniform with standard deviation weight_std (by default 0.02, Hugging
// Face's initializer_range), norms
// are 1; the bytes depend only on (shape, dtype, seed). The shape is validated as config.json
// would be, and a folder that already holds any of the three files is refused (nothing is
// overwritten).
void write_random_checkpoint(const std::string& dir, const RandomCheckpoint& options);

}  // namespace specula
