#include "engine/model_config.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <string_view>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"

namespace specula {
namespace {

using nlohmann::json;

template <typename T>
T read_key(const json& j, const char* key, const std::string& origin, bool required, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    SPECULA_CHECK(!required, origin, ": missing key '", key, "'");
    return fallback;
  }
  try {
    if constexpr (std::is_same_v<T, bool>) {
      SPECULA_CHECK(it->is_boolean(), origin, ": key '", key, "' must be a boolean, got ", it->dump());
    } else if constexpr (std::is_integral_v<T>) {
      SPECULA_CHECK(it->is_number_integer(), origin, ": key '", key, "' must be an integer, got ", it->dump());
      SPECULA_CHECK(it->is_number_unsigned() ? it->get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                                             : it->get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                   it->get<int64_t>() <= std::numeric_limits<T>::max(),
                    origin, ": key '", key, "' = ", it->dump(), " is out of range");
    } else {
      SPECULA_CHECK(it->is_number(), origin, ": key '", key, "' must be a number, got ", it->dump());
    }
    return it->get<T>();
  } catch (const json::exception& e) {
    throw SpeculaError(detail::concat(origin, ": key '", key, "': ", e.what()));
  }
}

json parse_object(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw SpeculaError(detail::concat(origin, ": invalid JSON: ", e.what()));
  }
  SPECULA_CHECK(j.is_object(), origin, ": expected a JSON object");
  return j;
}

// What the forward pass computes, as transformers' models/llama/modeling_llama.py does.
constexpr std::array<std::string_view, 1> kModelTypes = {"llama"};
constexpr std::array<std::string_view, 1> kArchitectures = {"LlamaForCausalLM"};

template <std::size_t N>
std::string listed(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

template <std::size_t N>
void check_name(const json& value, const std::array<std::string_view, N>& supported, const std::string& origin,
                const char* key) {
  SPECULA_CHECK(value.is_string() && std::find(supported.begin(), supported.end(), value.get<std::string>()) !=
                                         supported.end(),
                origin, ": key '", key, "' = ", value.dump(), " is not supported (supported: ", listed(supported), ")");
}

// `eos_token_id`: an integer or a non-empty list of integers; `fallback` when absent or null.
std::vector<int> read_eos_ids(const json& j, const std::string& origin, std::vector<int> fallback) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return fallback;
  const auto is_id = [](const json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= std::numeric_limits<int>::max();
  };
  std::vector<int> ids;
  if (is_id(*it)) {
    ids.push_back(it->get<int>());
  } else if (it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), is_id)) {
    for (const json& v : *it) ids.push_back(v.get<int>());
  }
  SPECULA_CHECK(!ids.empty(), origin, ": key 'eos_token_id' must be a token id or a non-empty list of them, got ",
                it->dump());
  return ids;
}

void check_special_ids(const ModelConfig& c, const std::string& origin) {
  SPECULA_CHECK(c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size, origin, ": key 'bos_token_id' = ",
                c.bos_token_id, " is outside the vocabulary [0, ", c.vocab_size, ")");
  for (int id : c.eos_token_ids) {
    SPECULA_CHECK(id >= 0 && id < c.vocab_size, origin, ": key 'eos_token_id' = ", id,
                  " is outside the vocabulary [0, ", c.vocab_size, ")");
  }
}

// Every key that would change the computation and is not implemented is refused with its value.
void refuse_unimplemented(const json& j, const std::string& origin) {
  if (auto it = j.find("model_type"); it != j.end()) check_name(*it, kModelTypes, origin, "model_type");
  if (auto it = j.find("architectures"); it != j.end()) {
    SPECULA_CHECK(it->is_array(), origin, ": key 'architectures' must be a list, got ", it->dump());
    for (const json& a : *it) check_name(a, kArchitectures, origin, "architectures");
  }
  if (auto act = j.find("hidden_act"); act != j.end()) {
    SPECULA_CHECK(act->is_string() && act->get<std::string>() == "silu", origin,
                  ": key 'hidden_act' must be \"silu\" (LLaMA family), got ", act->dump());
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    SPECULA_CHECK(!read_key<bool>(j, bias, origin, false, false), origin, ": key '", bias,
                  "' = true is not supported (biases are not implemented)");
  }
  // Sliding-window attention: Qwen2 configs carry a window with use_sliding_window = false.
  SPECULA_CHECK(!read_key<bool>(j, "use_sliding_window", origin, false, false), origin,
                ": key 'use_sliding_window' = true is not supported (sliding-window attention is not implemented)");
  const bool window_off = j.contains("use_sliding_window");  // and false, checked above
  if (auto it = j.find("sliding_window"); it != j.end()) {
    SPECULA_CHECK(it->is_null() || window_off, origin, ": key 'sliding_window' = ", it->dump(),
                  " is not supported (sliding-window attention is not implemented)");
  }
  if (auto it = j.find("layer_types"); it != j.end()) {
    SPECULA_CHECK(it->is_array() && std::all_of(it->begin(), it->end(), [](const json& t) { return t == "full_attention"; }),
                  origin, ": key 'layer_types' = ", it->dump(), " is not supported (only \"full_attention\" layers)");
  }
  // transformers >= 5 writes rope_theta inside rope_parameters: only the default rope type.
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    bool plain = it->is_object() && it->value("rope_type", "") == "default";
    for (const auto& [key, value] : it->items()) plain = plain && (key == "rope_type" || key == "rope_theta");
    SPECULA_CHECK(plain, origin, ": key 'rope_parameters' = ", it->dump(), " is not supported (only rope_type \"default\")");
  }
  // Keys whose presence (not null) changes the computation in a way not implemented.
  for (const char* key : {"rope_scaling", "quantization_config", "attn_logit_softcapping",
                          "final_logit_softcapping"}) {
    auto it = j.find(key);
    SPECULA_CHECK(it == j.end() || it->is_null(), origin, ": key '", key, "' = ", it->dump(), " is not supported");
  }
  if (auto it = j.find("partial_rotary_factor"); it != j.end()) {
    SPECULA_CHECK(it->is_number() && it->get<double>() == 1.0, origin, ": key 'partial_rotary_factor' = ", it->dump(),
                  " is not supported (RoPE over the whole head only)");
  }
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  const json j = parse_object(json_text, origin);

  ModelConfig c;
  c.hidden_size = read_key<int>(j, "hidden_size", origin, true, 0);
  c.intermediate_size = read_key<int>(j, "intermediate_size", origin, true, 0);
  c.num_attention_heads = read_key<int>(j, "num_attention_heads", origin, true, 0);
  c.num_hidden_layers = read_key<int>(j, "num_hidden_layers", origin, true, 0);
  c.vocab_size = read_key<int>(j, "vocab_size", origin, true, 0);
  c.num_key_value_heads = read_key<int>(j, "num_key_value_heads", origin, false, c.num_attention_heads);
  c.max_position_embeddings = read_key<int>(j, "max_position_embeddings", origin, false, 2048);
  c.rms_norm_eps = read_key<float>(j, "rms_norm_eps", origin, false, 1e-6f);
  c.rope_theta = read_key<float>(j, "rope_theta", origin, false, 10000.0f);
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object() && it->contains("rope_theta"))
    c.rope_theta = read_key<float>(*it, "rope_theta", origin + ": rope_parameters", true, 0.0f);
  c.tie_word_embeddings = read_key<bool>(j, "tie_word_embeddings", origin, false, false);
  c.bos_token_id = read_key<int>(j, "bos_token_id", origin, false, 1);
  c.eos_token_ids = read_eos_ids(j, origin, {2});
  c.eos_token_id = c.eos_token_ids.front();
  refuse_unimplemented(j, origin);

  auto positive = [&](int v, const char* key) {
    SPECULA_CHECK(v > 0, origin, ": key '", key, "' must be positive, got ", v);
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_position_embeddings, "max_position_embeddings");
  SPECULA_CHECK(c.rms_norm_eps > 0, origin, ": key 'rms_norm_eps' must be positive, got ", c.rms_norm_eps);
  SPECULA_CHECK(c.rope_theta > 0, origin, ": key 'rope_theta' must be positive, got ", c.rope_theta);
  SPECULA_CHECK(c.hidden_size % c.num_attention_heads == 0, origin, ": key 'num_attention_heads' (",
                c.num_attention_heads, ") must divide 'hidden_size' (", c.hidden_size, ")");
  SPECULA_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, origin,
                ": key 'num_key_value_heads' (", c.num_key_value_heads,
                ") must divide 'num_attention_heads' (", c.num_attention_heads, ")");
  SPECULA_CHECK(c.head_dim() % 2 == 0, origin, ": head dimension hidden_size / num_attention_heads = ",
                c.head_dim(), " must be even for RoPE");
  // An explicit head_dim must be the one the shapes imply (heads of another width are not implemented).
  const int head_dim = read_key<int>(j, "head_dim", origin, false, c.head_dim());
  SPECULA_CHECK(head_dim == c.head_dim(), origin, ": key 'head_dim' = ", head_dim,
                " is not supported: it differs from hidden_size / num_attention_heads = ", c.head_dim());
  check_special_ids(c, origin);
  return c;
}

void apply_generation_config(ModelConfig& config, const std::string& json_text, const std::string& origin) {
  const json j = parse_object(json_text, origin);
  config.eos_token_ids = read_eos_ids(j, origin, config.eos_token_ids);
  config.eos_token_id = config.eos_token_ids.front();
  check_special_ids(config, origin);
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  SPECULA_CHECK(in, path, ": cannot open model config");
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path);
}

}  // namespace specula
