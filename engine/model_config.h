// defines: ModelConfig, the LLaMA-family hyper-parameters read from a Hugging Face
// config.json, validated at load (each error names the file and the key): only the model
// types and architectures the forward pass implements, and every key that would change the
// computation either honoured or refused; apply_generation_config, the EOS ids of a
// generation_config.json.
#pragma once

#include <string>
#include <vector>

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
  int eos_token_id = 2;                 // the first of eos_token_ids
  std::vector<int> eos_token_ids = {2};  // any of them ends a sequence (config.json: an integer or a list)

  int head_dim() const { return hidden_size / num_attention_heads; }
  int kv_dim() const { return num_key_value_heads * head_dim(); }
};

// Parses and validates `path` (a config.json). Throws SpeculaError naming the file and key.
ModelConfig load_model_config(const std::string& path);
// Same, from JSON text; `origin` names the source in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// generation_config.json's `eos_token_id` (an integer or a list), when it has one, replaces the
// config's EOS ids, as Hugging Face's generate() uses it. Its sampling defaults (temperature,
// top_p, ...) are not applied: a request's options are what the caller gives.
void apply_generation_config(ModelConfig& config, const std::string& json_text, const std::string& origin);

}  // namespace specula
