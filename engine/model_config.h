// defines: ModelConfig, the LLaMA-family hyper-parameters read from a Hugging Face
// config.json, validated at load (each error names the file and the key).
#pragma once

#include <string>

namespace specula {

struct ModelConfig {
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int num_hidden_layers = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  int bos_token_id = 1;
  int eos_token_id = 2;

  int head_dim() const { return hidden_size / num_attention_heads; }
  int kv_dim() const { return num_key_value_heads * head_dim(); }
};

// Parses and validates `path` (a config.json). Throws SpeculaError naming the file and key.
ModelConfig load_model_config(const std::string& path);
// Same, from JSON text; `origin` names the source in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

}  // namespace specula
