#include "engine/model_config.h"

#include <fstream>
#include <limits>
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

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw SpeculaError(detail::concat(origin, ": invalid JSON: ", e.what()));
  }
  SPECULA_CHECK(j.is_object(), origin, ": expected a JSON object");

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
  c.tie_word_embeddings = read_key<bool>(j, "tie_word_embeddings", origin, false, false);
  c.bos_token_id = read_key<int>(j, "bos_token_id", origin, false, 1);
  c.eos_token_id = read_key<int>(j, "eos_token_id", origin, false, 2);

  if (auto act = j.find("hidden_act"); act != j.end()) {
    SPECULA_CHECK(act->is_string() && act->get<std::string>() == "silu", origin,
                  ": key 'hidden_act' must be \"silu\" (LLaMA family), got ", act->dump());
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end()) {
    SPECULA_CHECK(rs->is_null(), origin, ": key 'rope_scaling' is not supported, got ", rs->dump());
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    SPECULA_CHECK(!read_key<bool>(j, bias, origin, false, false), origin, ": key '", bias,
                  "' = true is not supported (LLaMA has no biases)");
  }

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
  for (auto [id, key] : {std::pair{c.bos_token_id, "bos_token_id"}, std::pair{c.eos_token_id, "eos_token_id"}}) {
    SPECULA_CHECK(id >= 0 && id < c.vocab_size, origin, ": key '", key, "' = ", id,
                  " is outside the vocabulary [0, ", c.vocab_size, ")");
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  SPECULA_CHECK(in, path, ": cannot open model config");
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path);
}

}  // namespace specula
