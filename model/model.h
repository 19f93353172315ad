// defines: Model, a LLaMA, Mistral, Qwen2 or Qwen3 checkpoint as loaded from a Hugging Face
// folder: its config, tokenizer and the memory-mapped weights, every tensor the config implies
// validated and named (LayerWeights), and any other tensor an error. It computes nothing: a Backend (engine/backend.h) derives what it
// runs from it (packed matrices on the CPU, device copies on a GPU).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "text/tokenizer.h"
#include "kv/page_storage.h"

namespace specula {

// One decoder layer's tensors, views into the mapped checkpoint (q_dim = heads x head_dim).
struct LayerWeights {
  const TensorView* q = nullptr;     // [q_dim, hidden]
  const TensorView* k = nullptr;     // [kv_dim, hidden]
  const TensorView* v = nullptr;     // [kv_dim, hidden]
  const TensorView* o = nullptr;     // [hidden, q_dim]
  const TensorView* gate = nullptr;  // [ffn, hidden]
  const TensorView* up = nullptr;    // [ffn, hidden]
  const TensorView* down = nullptr;  // [hidden, ffn]
  const TensorView* attn_norm = nullptr;  // [hidden]
  const TensorView* mlp_norm = nullptr;   // [hidden]
  // What the config adds (null when it does not): biases and Qwen3's per-head norms.
  const TensorView* q_bias = nullptr;     // [q_dim]    attention_bias
  const TensorView* k_bias = nullptr;     // [kv_dim]   attention_bias
  const TensorView* v_bias = nullptr;     // [kv_dim]   attention_bias
  const TensorView* o_bias = nullptr;     // [hidden]   o_bias
  const TensorView* gate_bias = nullptr;  // [ffn]      mlp_bias
  const TensorView* up_bias = nullptr;    // [ffn]      mlp_bias
  const TensorView* down_bias = nullptr;  // [hidden]   mlp_bias
  const TensorView* q_norm = nullptr;     // [head_dim] qk_norm
  const TensorView* k_norm = nullptr;     // [head_dim] qk_norm
};

class Model {
 public:
  // Loads config.json, the safetensors weights and the tokenizer (Tokenizer::load) from `dir`, validating
  // every tensor the config implies. Throws SpeculaError naming the file and tensor.
  explicit Model(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  const TensorView& embed_tokens() const { return *embed_; }   // [vocab, hidden]
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const TensorView& final_norm() const { return *final_norm_; }  // [hidden]
  const TensorView& lm_head() const { return *lm_head_; }        // [vocab, hidden]; the embedding when tied

  // The cache layout this model needs (f32 pages; a caller may choose another KvDType).
  KvLayout kv_layout(int block_size) const {
    return {config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim(), block_size, KvDType::kF32};
  }

 private:
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const TensorView* embed_ = nullptr;
  std::vector<LayerWeights> layers_;
  const TensorView* final_norm_ = nullptr;
  const TensorView* lm_head_ = nullptr;
};

}  // namespace specula
