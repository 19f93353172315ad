// defines: ModelFamily, RopeScaling and ModelConfig, the hyper-parameters of a LLaMA, Mistral,
// Qwen2/2.5 or Qwen3 checkpoint read from a Hugging Face config.json, validated at load (each
// error names the file and the key): only the model types and architectures the forward pass
// implements, and every key that would change the computation either honoured or refused;
// apply_generation_config, the EOS ids of a generation_config.json.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace specula {

// What each family adds to the LLaMA forward pass (transformers' models/<family>/modeling_<family>.py):
//   llama   optional attention_bias (q, k, v, o) and mlp_bias (gate, up, down)
//   mistral sliding-window attention (sliding_window; 4096 when absent, as MistralConfig)
//   qwen2   q, k, v biases (always)
//   qwen3   per-head RMSNorm of q and k before RoPE (q_norm, k_norm), optional attention_bias,
//           head_dim of its own (128 when absent, as Qwen3Config)
enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3 };

// RoPE frequency scaling (config.json `rope_scaling`), as transformers' modeling_rope_utils.py.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;              // llama3
  float high_freq_factor = 4.0f;             // llama3
  int original_max_position_embeddings = 0;  // llama3
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
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
  int explicit_head_dim = 0;        // config.json head_dim; 0: hidden_size / num_attention_heads
  bool attention_bias = false;      // biases of q, k, v (and o unless the family has none there)
  bool o_bias = false;              // a bias on o_proj
  bool mlp_bias = false;            // biases of gate, up and down
  bool qk_norm = false;             // per-head RMSNorm of q and k before RoPE (Qwen3)
  int sliding_window = 0;           // a key is seen only when query position - key position < it; 0: none
  RopeScaling rope_scaling;
  int bos_token_id = 1;
  int eos_token_id = 2;                 // the first of eos_token_ids
  std::vector<int> eos_token_ids = {2};  // any of them ends a sequence (config.json: an integer or a list)
  // generation_config.json's other settings (sampling defaults such as do_sample, temperature,
  // top_p), never applied: (key, value as JSON text), in key order, for requests to report.
  std::vector<std::pair<std::string, std::string>> generation_defaults;

  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads; }
  int q_dim() const { return num_attention_heads * head_dim(); }
  int kv_dim() const { return num_key_value_heads * head_dim(); }
};

// Parses and validates `path` (a config.json). Throws SpeculaError naming the file and key.
ModelConfig load_model_config(const std::string& path);
// Same, from JSON text; `origin` names the source in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// generation_config.json's `eos_token_id` (an integer or a list), when it has one, replaces the
// config's EOS ids, as Hugging Face's generate() uses it. Its other keys (sampling defaults:
// temperature, top_p, ...) are recorded in generation_defaults, not applied: a request's
// options are what the caller gives.
void apply_generation_config(ModelConfig& config, const std::string& json_text, const std::string& origin);

}  // namespace specula
