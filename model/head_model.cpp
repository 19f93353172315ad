#include "model/head_model.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "model/json_object.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// j[key] as an int; `fallback` when absent or null.
int optional_int(const json& j, const char* key, const std::string& origin, int fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  SPECULA_CHECK(it->is_number_integer() && it->get<int64_t>() > 0 &&
                    it->get<int64_t>() <= std::numeric_limits<int>::max(),
                origin, ": key '", key, "' must be a positive integer, got ", it->dump());
  return it->get<int>();
}

// j[key] as a bool; `fallback` when absent or null.
bool optional_bool(const json& j, const char* key, const std::string& origin, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  SPECULA_CHECK(it->is_boolean(), origin, ": key '", key, "' must be a boolean, got ", it->dump());
  return it->get<bool>();
}

template <typename T>
std::string list_text(const std::vector<T>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The tap ids of j[key] (a non-empty list of integers), or nullopt when absent or null.
std::optional<std::vector<int>> optional_ids(const json& j, const char* key, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  const auto is_id = [](const json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<int>::min() / 2 &&
           v.get<int64_t>() <= std::numeric_limits<int>::max() / 2;
  };
  SPECULA_CHECK(it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), is_id), origin, ": key '", key,
                "' must be a non-empty list of layer ids, got ", it->dump());
  std::vector<int> ids;
  for (const json& v : *it) ids.push_back(v.get<int>());
  return ids;
}

std::vector<std::string> architectures(const json& j, const std::string& origin) {
  std::vector<std::string> names;
  const auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) return names;
  SPECULA_CHECK(it->is_array() && std::all_of(it->begin(), it->end(), [](const json& a) { return a.is_string(); }),
                origin, ": key 'architectures' must be a list of names, got ", it->dump());
  for (const json& a : *it) names.push_back(a.get<std::string>());
  return names;
}

bool has(const std::vector<std::string>& names, const char* name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A folder without safetensors weights: refused, with how to convert a PyTorch pickle.
void check_safetensors(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / "model.safetensors") || fs::exists(d / "model.safetensors.index.json")) return;
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"}) {
    SPECULA_CHECK(!fs::exists(d / pickle), (d / pickle).string(),
                  ": PyTorch pickle weights are not read; convert them to safetensors (model.safetensors, e.g. "
                  "with tools/heads/ in this repository, or safetensors.torch.save_file(torch.load(path), "
                  "'model.safetensors'))");
  }
  throw SpeculaError(detail::concat(dir, ": no model.safetensors or model.safetensors.index.json"));
}

// The Llama keys of the head's decoder layer, parsed as a model config from `j`.
ModelConfig parse_layer(json j, const std::string& origin) {
  j.erase("architectures");  // the head's own class name; the layer is LLaMA's
  ModelConfig c = parse_model_config(j.dump(), origin);
  SPECULA_CHECK(c.num_hidden_layers == 1, origin, ": key 'num_hidden_layers' = ", c.num_hidden_layers,
                ": an EAGLE head has exactly one decoder layer");
  SPECULA_CHECK(c.family == ModelFamily::kLlama, origin, ": key 'model_type' = ", j.value("model_type", std::string()),
                ": an EAGLE head's decoder layer is LLaMA's (model_type \"llama\")");
  SPECULA_CHECK(!c.attention_bias && !c.mlp_bias, origin,
                ": keys 'attention_bias' / 'mlp_bias' = true: an EAGLE head's layer has no biases");
  return c;
}

// The draft method that loads heads of `kind`.
const char* method_of(HeadKind kind) { return kind == HeadKind::kEagle3 ? "eagle3" : "eagle"; }

}  // namespace

const char* head_kind_name(HeadKind kind) { return kind == HeadKind::kEagle3 ? "EAGLE-3" : "EAGLE-1"; }

const char* head_layout_name(HeadLayout layout) {
  return layout == HeadLayout::kEagle ? "EAGLE reference" : "speculators (eagle3)";
}

std::vector<int> default_tap_layers(int num_layers) { return {2, num_layers / 2, num_layers - 3}; }

HeadModel::HeadModel(const std::string& dir, const ModelConfig& target, HeadKind kind) : dir_(dir) {
  const std::string origin = (fs::path(dir) / "config.json").string();
  const json j = read_json_object(origin);
  HeadConfig& c = config_;
  c.target_layers = target.num_hidden_layers;

  // Which head format the folder holds: the implemented ones, and the others by name.
  SPECULA_CHECK(!j.contains("medusa_num_heads"), origin, ": a Medusa head (key 'medusa_num_heads' = ",
                j["medusa_num_heads"].dump(), "): not an ", head_kind_name(kind),
                " head; Medusa heads load with draft.method medusa (--draft-method medusa)");
  const std::vector<std::string> arch = architectures(j, origin);
  if (const auto it = j.find("speculators_model_type"); it != j.end()) {
    SPECULA_CHECK(*it == "eagle3", origin, ": key 'speculators_model_type' = ", it->dump(),
                  ": this speculators format is not implemented yet (implemented: \"eagle3\")");
    c.layout = HeadLayout::kSpeculators;
  } else {
    // The EAGLE reference's own heads say LlamaForCausalLM, EAGLE-1/2 and EAGLE-3 alike: the weights tell.
    SPECULA_CHECK(has(arch, "LlamaForCausalLMEagle3") || has(arch, "LlamaForCausalLM"), origin,
                  ": key 'architectures' = ", j.value("architectures", json()).dump(),
                  " is not an EAGLE head (expected \"LlamaForCausalLMEagle3\", \"LlamaForCausalLM\" with "
                  "midlayer.* (EAGLE-3) or fc.bias and layers.0.* (EAGLE-1) tensors, or key "
                  "'speculators_model_type' = \"eagle3\")");
    c.layout = HeadLayout::kEagle;
  }
  check_safetensors(dir);
  checkpoint_ = std::make_unique<Checkpoint>(dir, /*index_tensors=*/true);
  const Checkpoint& ck = *checkpoint_;
  std::string held = c.layout == HeadLayout::kSpeculators ? "speculators_model_type \"eagle3\""
                                                          : "architectures LlamaForCausalLMEagle3";
  c.kind = HeadKind::kEagle3;
  if (c.layout == HeadLayout::kEagle && !has(arch, "LlamaForCausalLMEagle3")) {
    const bool eagle1 = ck.contains("fc.bias") || ck.contains("layers.0.self_attn.q_proj.weight");
    SPECULA_CHECK(eagle1 || ck.contains("midlayer.self_attn.q_proj.weight"), dir,
                  ": architectures LlamaForCausalLM with neither midlayer.* tensors (EAGLE-3) nor fc.bias and "
                  "layers.0.* (EAGLE-1) is not an EAGLE head");
    held = eagle1 ? "architectures LlamaForCausalLM, tensors fc.bias and layers.0.*"
                  : "architectures LlamaForCausalLM, tensors midlayer.*";
    if (eagle1) c.kind = HeadKind::kEagle1;
  }
  SPECULA_CHECK(c.kind == kind, dir, ": holds an ", head_kind_name(c.kind), " head (", held, "), not an ",
                head_kind_name(kind), " head; ", head_kind_name(c.kind), " heads load with draft.method ",
                method_of(c.kind), " (--draft-method ", method_of(c.kind), ")");
  const bool eagle1 = c.kind == HeadKind::kEagle1;
  const std::string p = c.layout == HeadLayout::kEagle && !eagle1 ? "midlayer." : "layers.0.";

  // The decoder layer's keys and the head's own.
  const json* top = &j;
  std::string layer_origin = origin;
  if (c.layout == HeadLayout::kSpeculators) {
    const auto it = j.find("transformer_layer_config");
    SPECULA_CHECK(it != j.end() && it->is_object(), origin, ": key 'transformer_layer_config' (an object) is missing");
    layer_origin = origin + ": transformer_layer_config";
    c.layer = parse_layer(*it, layer_origin);
  } else {
    c.layer = parse_layer(j, origin);
  }
  const ModelConfig& l = c.layer;
  SPECULA_CHECK(l.vocab_size == target.vocab_size, layer_origin, ": key 'vocab_size' = ", l.vocab_size,
                " differs from the target's vocab_size ", target.vocab_size);
  if (eagle1) {
    // The feature is the target's hidden state itself: one width, one tap (the last layer's output).
    SPECULA_CHECK(l.hidden_size == target.hidden_size, origin, ": key 'hidden_size' = ", l.hidden_size,
                  " differs from the target's hidden_size ", target.hidden_size,
                  ": an EAGLE-1 head reads the target's last hidden state as it is");
    c.draft_vocab_size = l.vocab_size;
    c.target_hidden_size = target.hidden_size;
    c.tap_layers = {c.target_layers};
  } else {
    // speculators writes draft_vocab_size always, and reads 32000 where it is absent: required there.
    SPECULA_CHECK(c.layout == HeadLayout::kEagle || top->contains("draft_vocab_size"), origin,
                  ": missing key 'draft_vocab_size'");
    c.draft_vocab_size = optional_int(*top, "draft_vocab_size", origin, l.vocab_size);
    SPECULA_CHECK(c.draft_vocab_size <= l.vocab_size, origin, ": key 'draft_vocab_size' = ", c.draft_vocab_size,
                  " exceeds the vocab_size ", l.vocab_size);
    c.target_hidden_size = optional_int(*top, "target_hidden_size", origin, l.hidden_size);
    SPECULA_CHECK(c.target_hidden_size == target.hidden_size, origin, ": key 'target_hidden_size' = ",
                  c.target_hidden_size, top->contains("target_hidden_size") ? "" : " (absent: the head's hidden_size)",
                  " differs from the target's hidden_size ", target.hidden_size);
    c.norm_before_residual = optional_bool(*top, "norm_before_residual", origin, false);
    SPECULA_CHECK(!optional_bool(*top, "norm_before_fc", origin, false), origin,
                  ": key 'norm_before_fc' = true (an RMSNorm over the taps before fc) is not implemented yet");

    // Tap layers, converted to inputs of target layers.
    std::optional<std::vector<int>> ids;
    std::string tap_key, convention;
    int shift = 0;
    if (c.layout == HeadLayout::kEagle) {
      if (const auto e = j.find("eagle_config"); e != j.end() && !e->is_null()) {
        SPECULA_CHECK(e->is_object(), origin, ": key 'eagle_config' must be an object, got ", e->dump());
        SPECULA_CHECK(optional_bool(*e, "use_aux_hidden_state", origin + ": eagle_config", true), origin,
                      ": key 'eagle_config.use_aux_hidden_state' = false (a head fed one target state, no fc) is not "
                      "implemented yet");
        ids = optional_ids(*e, "eagle_aux_hidden_state_layer_ids", origin + ": eagle_config");
        tap_key = "eagle_config.eagle_aux_hidden_state_layer_ids";
        convention = "the output of target layer";
        shift = 1;  // the output of layer i is the input of layer i + 1
      }
    } else {
      ids = optional_ids(j, "eagle_aux_hidden_state_layer_ids", origin);
      tap_key = "eagle_aux_hidden_state_layer_ids";
      convention = "the input of target layer";
    }
    if (ids) {
      for (int id : *ids) {
        const int tap = id + shift;
        SPECULA_CHECK(tap >= 0 && tap <= c.target_layers, origin, ": key '", tap_key, "' = ", list_text(*ids),
                      ": layer id ", id, " (", convention, " ", id, ") lies outside the target's ", c.target_layers,
                      " layers (inputs of layers [0, ", c.target_layers, "], the last the final hidden state)");
        c.tap_layers.push_back(tap);
      }
    } else {
      c.tap_layers = default_tap_layers(c.target_layers);
      for (int tap : c.tap_layers) {
        SPECULA_CHECK(tap >= 0 && tap <= c.target_layers, origin, ": no tap layers given (key '",
                      c.layout == HeadLayout::kEagle ? "eagle_config.eagle_aux_hidden_state_layer_ids"
                                                     : "eagle_aux_hidden_state_layer_ids",
                      "'), and the default inputs of layers ", list_text(c.tap_layers), " lie outside the target's ",
                      c.target_layers, " layers [0, ", c.target_layers, "]");
      }
    }
  }

  // The tensors the layout implies; any other is an error.
  const int64_t hidden = l.hidden_size, ffn = l.intermediate_size, q_dim = l.q_dim(), kv = l.kv_dim();
  const int64_t vocab = l.vocab_size, draft_vocab = c.draft_vocab_size;
  std::set<std::string> used;
  const auto get = [&](const std::string& name, const std::vector<int64_t>& shape) {
    used.insert(name);
    return &ck.get(name, shape);
  };
  const int64_t attn_in = eagle1 ? hidden : 2 * hidden;
  fc_ = get("fc.weight", {hidden, eagle1 ? 2 * hidden : int64_t(c.num_taps()) * c.target_hidden_size});
  layer_.q = get(p + "self_attn.q_proj.weight", {q_dim, attn_in});
  layer_.k = get(p + "self_attn.k_proj.weight", {kv, attn_in});
  layer_.v = get(p + "self_attn.v_proj.weight", {kv, attn_in});
  layer_.o = get(p + "self_attn.o_proj.weight", {hidden, q_dim});
  layer_.gate = get(p + "mlp.gate_proj.weight", {ffn, hidden});
  layer_.up = get(p + "mlp.up_proj.weight", {ffn, hidden});
  layer_.down = get(p + "mlp.down_proj.weight", {hidden, ffn});
  layer_.mlp_norm = get(p + "post_attention_layernorm.weight", {hidden});
  if (ck.contains(p + "self_attn.rotary_emb.inv_freq")) get(p + "self_attn.rotary_emb.inv_freq", {l.head_dim() / 2});
  if (eagle1) {
    fc_bias_ = get("fc.bias", {hidden});
  } else {
    layer_.attn_norm = get(p + "input_layernorm.weight", {hidden});
    hidden_norm_ = get(p + "hidden_norm.weight", {hidden});
    final_norm_ = get("norm.weight", {hidden});
    lm_head_ = get("lm_head.weight", {draft_vocab, hidden});
  }
  if (ck.contains("embed_tokens.weight")) {
    embed_ = get("embed_tokens.weight", {vocab, hidden});
  } else {
    SPECULA_CHECK(hidden == target.hidden_size, dir, ": the head has no tensor 'embed_tokens.weight', so it embeds "
                  "with the target's embedding, which needs its hidden_size (", hidden,
                  ") to equal the target's hidden_size (", target.hidden_size, ")");
  }

  // The vocabulary maps (I64 / I32 d2t, BOOL t2d).
  const auto index = [&](const char* name, const std::vector<int64_t>& shape, bool boolean) -> const IndexTensorView* {
    SPECULA_CHECK(!ck.contains(name), ck.tensors().at(name)->origin, ": tensor '", name, "' has dtype ",
                  dtype_name(ck.tensors().at(name)->dtype), ", expected ", boolean ? "BOOL" : "I64 or I32");
    const auto it = ck.index_tensors().find(name);
    if (it == ck.index_tensors().end()) return nullptr;
    used.insert(name);
    const IndexTensorView& t = *it->second;
    SPECULA_CHECK((t.type == IndexTensorView::Type::kBool) == boolean, t.origin, ": tensor '", name, "' has dtype ",
                  index_type_name(t.type), ", expected ", boolean ? "BOOL" : "I64 or I32");
    SPECULA_CHECK(t.shape == shape, t.origin, ": tensor '", name, "' has shape ", list_text(t.shape), ", expected ",
                  list_text(shape));
    return &t;
  };
  if (!eagle1) {  // EAGLE-1 drafts over the target's vocabulary
    d2t_ = index("d2t", {draft_vocab}, false);
    t2d_ = index("t2d", {vocab}, true);
  }
  draft_to_target_.resize(static_cast<std::size_t>(draft_vocab));
  if (d2t_ == nullptr) {
    SPECULA_CHECK(draft_vocab == vocab, dir, ": the head has no tensor 'd2t' but its draft_vocab_size (", draft_vocab,
                  ") differs from the vocab_size (", vocab, ")");
    for (int i = 0; i < draft_vocab; ++i) draft_to_target_[i] = i;
  } else {
    for (int64_t i = 0; i < draft_vocab; ++i) {
      const int64_t offset = d2t_->at(i);
      const int64_t id = offset >= -vocab && offset <= vocab ? i + offset : -1;  // no overflow for any offset
      SPECULA_CHECK(id >= 0 && id < vocab, d2t_->origin, ": tensor 'd2t' maps draft id ", i, " to target id ", i, " + ",
                    offset, id >= 0 ? " = " + std::to_string(id) : std::string(),
                    ", outside the target's vocabulary [0, ",
                    vocab, ")");
      draft_to_target_[i] = static_cast<int>(id);
    }
  }
  std::vector<int> draft_of(static_cast<std::size_t>(vocab), -1);  // target id -> draft id
  for (int i = 0; i < draft_vocab; ++i) {
    int& seen = draft_of[draft_to_target_[i]];
    SPECULA_CHECK(seen < 0, d2t_->origin, ": tensor 'd2t' maps draft ids ", seen, " and ", i, " both to target id ",
                  draft_to_target_[i]);
    seen = i;
  }
  if (t2d_ != nullptr) {
    for (int64_t t = 0; t < vocab; ++t) {
      const bool mapped = draft_of[t] >= 0;
      SPECULA_CHECK(mapped == (t2d_->at(t) != 0), t2d_->origin, ": tensor 't2d' disagrees with 'd2t' at target id ", t,
                    ": t2d[", t, "] = ", mapped ? "false" : "true", " but ",
                    mapped ? "draft id " + std::to_string(draft_of[t]) + " maps to it"
                           : std::string("no draft id maps to it"));
    }
  }

  const auto check_used = [&](const std::string& name, const std::string& file) {
    SPECULA_CHECK(used.count(name) != 0, file, ": unknown tensor '", name, "': ", head_kind_name(c.kind),
                  " heads in the ", head_layout_name(c.layout), " layout do not use it");
  };
  for (const auto& [name, tensor] : ck.tensors()) check_used(name, tensor->origin);
  for (const auto& [name, tensor] : ck.index_tensors()) check_used(name, tensor->origin);
}

}  // namespace specula
