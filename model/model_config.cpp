#include "model/model_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <string_view>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "model/json_object.h"

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
      // 1e300 is a finite double but no float: checked before the conversion.
      SPECULA_CHECK(std::fabs(it->get<double>()) <= std::numeric_limits<T>::max(), origin, ": key '", key, "' = ",
                    it->dump(), " is out of range of a float");
    }
    return it->get<T>();
  } catch (const json::exception& e) {
    throw SpeculaError(detail::concat(origin, ": key '", key, "': ", e.what()));
  }
}

// The families the forward pass computes, each as transformers' models/<model_type>/modeling_<model_type>.py.
struct Family {
  std::string_view model_type, architecture;
  ModelFamily family;
};
constexpr std::array<Family, 4> kFamilies = {{{"llama", "LlamaForCausalLM", ModelFamily::kLlama},
                                              {"mistral", "MistralForCausalLM", ModelFamily::kMistral},
                                              {"qwen2", "Qwen2ForCausalLM", ModelFamily::kQwen2},
                                              {"qwen3", "Qwen3ForCausalLM", ModelFamily::kQwen3}}};

// model_type (LLaMA when absent) and architectures, which must name that family.
const Family& read_family(const json& j, const std::string& origin) {
  std::string known;
  for (const Family& f : kFamilies) known += (known.empty() ? "" : ", ") + std::string(f.model_type);
  const Family* family = &kFamilies[0];
  if (auto it = j.find("model_type"); it != j.end()) {
    const auto match = std::find_if(kFamilies.begin(), kFamilies.end(),
                                    [&](const Family& f) { return it->is_string() && *it == f.model_type; });
    SPECULA_CHECK(match != kFamilies.end(), origin, ": key 'model_type' = ", it->dump(), " is not supported (supported: ",
                  known, ")");
    family = &*match;
  }
  if (auto it = j.find("architectures"); it != j.end()) {
    SPECULA_CHECK(it->is_array(), origin, ": key 'architectures' must be a list, got ", it->dump());
    for (const json& a : *it) {
      SPECULA_CHECK(a.is_string() && a == family->architecture, origin, ": key 'architectures' = ", a.dump(),
                    " is not supported for model_type \"", family->model_type, "\" (supported: ", family->architecture,
                    ")");
    }
  }
  return *family;
}

// A number of the object `j` (a rope_scaling) that must be there and positive.
float positive_number(const json& j, const char* key, const std::string& origin) {
  const float v = read_key<float>(j, key, origin, true, 0.0f);
  SPECULA_CHECK(v > 0, origin, ": key '", key, "' must be positive, got ", v);
  return v;
}

// rope_scaling (or transformers >= 5's rope_parameters): default, linear and llama3 only.
RopeScaling read_rope_scaling(const json& j, const std::string& origin) {
  RopeScaling r;
  const char* key = j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return r;
  SPECULA_CHECK(it->is_object(), origin, ": key '", key, "' must be an object, got ", it->dump());
  const json& rs = *it;
  const std::string type = rs.contains("rope_type") ? rs.value("rope_type", "") : rs.value("type", "");
  const std::string where = origin + ": " + key;
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScaling::Type::kLinear;
    r.factor = positive_number(rs, "factor", where);
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
    r.factor = positive_number(rs, "factor", where);
    r.low_freq_factor = positive_number(rs, "low_freq_factor", where);
    r.high_freq_factor = positive_number(rs, "high_freq_factor", where);
    r.original_max_position_embeddings = read_key<int>(rs, "original_max_position_embeddings", where, true, 0);
    SPECULA_CHECK(r.original_max_position_embeddings > 0 && r.high_freq_factor > r.low_freq_factor, where,
                  " = ", rs.dump(), ": needs original_max_position_embeddings > 0 and high_freq_factor > low_freq_factor");
  } else {
    throw SpeculaError(detail::concat(origin, ": key '", key, "' = ", rs.dump(),
                                      " is not supported (rope types: default, linear, llama3)"));
  }
  return r;
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

// The keys that change the computation: each honoured for its family (into `c`) or refused with its value.
void read_family_keys(const json& j, const std::string& origin, ModelConfig& c) {
  const Family& family = read_family(j, origin);
  c.family = family.family;
  const auto refuse_true = [&](const char* key, const char* why) {
    SPECULA_CHECK(!read_key<bool>(j, key, origin, false, false), origin, ": key '", key, "' = true is not supported ",
                  why);
  };
  if (auto act = j.find("hidden_act"); act != j.end()) {
    SPECULA_CHECK(act->is_string() && act->get<std::string>() == "silu", origin,
                  ": key 'hidden_act' must be \"silu\" (LLaMA family), got ", act->dump());
  }
  switch (c.family) {
    case ModelFamily::kLlama:  // LlamaAttention: q, k, v, o biases; LlamaMLP: gate, up, down biases
      c.attention_bias = c.o_bias = read_key<bool>(j, "attention_bias", origin, false, false);
      c.mlp_bias = read_key<bool>(j, "mlp_bias", origin, false, false);
      break;
    case ModelFamily::kQwen3:  // Qwen3Attention: q, k, v, o biases; q_norm / k_norm; head_dim 128 by default
      c.attention_bias = c.o_bias = read_key<bool>(j, "attention_bias", origin, false, false);
      c.qk_norm = true;
      c.explicit_head_dim = 128;
      break;
    case ModelFamily::kQwen2:  // Qwen2Attention: q, k, v biases, none on o
      c.attention_bias = true;
      break;
    case ModelFamily::kMistral:  // MistralConfig: sliding_window 4096 by default, null for none
      c.sliding_window = 4096;
      break;
  }
  if (c.family != ModelFamily::kLlama && c.family != ModelFamily::kQwen3)
    refuse_true("attention_bias", "for this model type (its attention biases are fixed)");
  if (c.family != ModelFamily::kLlama) refuse_true("mlp_bias", "for this model type (its MLP has no biases)");
  if (auto it = j.find("sliding_window"); it != j.end()) {
    if (c.family == ModelFamily::kMistral) {
      c.sliding_window = read_key<int>(j, "sliding_window", origin, false, 0);
      SPECULA_CHECK(c.sliding_window >= 0, origin, ": key 'sliding_window' must be positive or null, got ", it->dump());
    } else {
      // Qwen2/Qwen3 configs carry a window that use_sliding_window = false switches off.
      SPECULA_CHECK(it->is_null() || j.contains("use_sliding_window"), origin, ": key 'sliding_window' = ", it->dump(),
                    " is not supported for this model type (sliding windows are implemented for mistral)");
    }
  }
  refuse_true("use_sliding_window", "(Qwen's per-layer sliding windows, max_window_layers, are not implemented)");
  if (auto it = j.find("layer_types"); it != j.end()) {
    SPECULA_CHECK(it->is_array() && std::all_of(it->begin(), it->end(), [](const json& t) { return t == "full_attention"; }),
                  origin, ": key 'layer_types' = ", it->dump(), " is not supported (only \"full_attention\" layers)");
  }
  c.rope_scaling = read_rope_scaling(j, origin);
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object() && it->contains("rope_theta"))
    c.rope_theta = read_key<float>(*it, "rope_theta", origin + ": rope_parameters", true, 0.0f);
  // Keys whose presence (not null) changes the computation in a way not implemented.
  for (const char* key : {"quantization_config", "attn_logit_softcapping", "final_logit_softcapping"}) {
    auto it = j.find(key);
    SPECULA_CHECK(it == j.end() || it->is_null(), origin, ": key '", key, "' = ", it->dump(), " is not supported");
  }
  if (auto it = j.find("partial_rotary_factor"); it != j.end()) {
    SPECULA_CHECK(it->is_number() && it->get<double>() == 1.0, origin, ": key 'partial_rotary_factor' = ", it->dump(),
                  " is not supported (RoPE over the whole head only)");
  }
  c.explicit_head_dim = read_key<int>(j, "head_dim", origin, false, c.explicit_head_dim);
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  const json j = parse_json_object(json_text, origin);

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
  c.eos_token_ids = read_eos_ids(j, origin, {2});
  c.eos_token_id = c.eos_token_ids.front();
  read_family_keys(j, origin, c);

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
  SPECULA_CHECK(c.explicit_head_dim > 0 || c.hidden_size % c.num_attention_heads == 0, origin,
                ": key 'num_attention_heads' (", c.num_attention_heads, ") must divide 'hidden_size' (", c.hidden_size,
                ") when there is no 'head_dim'");
  SPECULA_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, origin,
                ": key 'num_key_value_heads' (", c.num_key_value_heads,
                ") must divide 'num_attention_heads' (", c.num_attention_heads, ")");
  SPECULA_CHECK(c.head_dim() > 0 && c.head_dim() % 2 == 0, origin, ": head dimension ", c.head_dim(),
                " ('head_dim', else hidden_size / num_attention_heads) must be even and positive for RoPE");
  check_special_ids(c, origin);
  return c;
}

void apply_generation_config(ModelConfig& config, const std::string& json_text, const std::string& origin) {
  const json j = parse_json_object(json_text, origin);
  config.eos_token_ids = read_eos_ids(j, origin, config.eos_token_ids);
  config.eos_token_id = config.eos_token_ids.front();
  check_special_ids(config, origin);
  // Token ids are applied above or unused by generation; everything else is reported.
  static const std::array<std::string_view, 6> kNotReported = {
      "eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id", "transformers_version", "_from_model_config"};
  config.generation_defaults.clear();
  for (const auto& [key, value] : j.items()) {  // nlohmann's object: keys in order
    if (std::find(kNotReported.begin(), kNotReported.end(), key) == kNotReported.end())
      config.generation_defaults.emplace_back(key, value.dump());
  }
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  SPECULA_CHECK(in, path, ": cannot open model config");
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path);
}

}  // namespace specula
