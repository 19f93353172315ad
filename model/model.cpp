#include "model/model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

// config.json, with generation_config.json's EOS ids when the folder has one.
ModelConfig load_config(const std::string& dir) {
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  const fs::path generation = fs::path(dir) / "generation_config.json";
  if (fs::exists(generation)) {
    std::ifstream in(generation);
    SPECULA_CHECK(in, generation.string(), ": cannot open");
    std::stringstream text;
    text << in.rdbuf();
    apply_generation_config(config, text.str(), generation.string());
  }
  return config;
}

}  // namespace

Model::Model(const std::string& dir)
    : dir_(dir),
      config_(load_config(dir)),
      checkpoint_(std::make_unique<Checkpoint>(dir)),
      tokenizer_(std::make_unique<Tokenizer>(Tokenizer::load(dir, config_.vocab_size))) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size, kv = c.kv_dim(), vocab = c.vocab_size;
  const Checkpoint& ck = *checkpoint_;
  std::set<std::string> used;
  const auto get = [&](const std::string& name, const std::vector<int64_t>& shape) {
    used.insert(name);
    return &ck.get(name, shape);
  };
  embed_ = get("model.embed_tokens.weight", {vocab, hidden});
  final_norm_ = get("model.norm.weight", {hidden});
  const int64_t q_dim = c.q_dim(), head_dim = c.head_dim();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights w{get(p + "self_attn.q_proj.weight", {q_dim, hidden}),
                   get(p + "self_attn.k_proj.weight", {kv, hidden}),
                   get(p + "self_attn.v_proj.weight", {kv, hidden}),
                   get(p + "self_attn.o_proj.weight", {hidden, q_dim}),
                   get(p + "mlp.gate_proj.weight", {ffn, hidden}),
                   get(p + "mlp.up_proj.weight", {ffn, hidden}),
                   get(p + "mlp.down_proj.weight", {hidden, ffn}),
                   get(p + "input_layernorm.weight", {hidden}),
                   get(p + "post_attention_layernorm.weight", {hidden})};
    const auto optional = [&](bool present, const std::string& name, int64_t width) {
      return present ? get(p + name, {width}) : nullptr;
    };
    w.q_bias = optional(c.attention_bias, "self_attn.q_proj.bias", q_dim);
    w.k_bias = optional(c.attention_bias, "self_attn.k_proj.bias", kv);
    w.v_bias = optional(c.attention_bias, "self_attn.v_proj.bias", kv);
    w.o_bias = optional(c.o_bias, "self_attn.o_proj.bias", hidden);
    w.gate_bias = optional(c.mlp_bias, "mlp.gate_proj.bias", ffn);
    w.up_bias = optional(c.mlp_bias, "mlp.up_proj.bias", ffn);
    w.down_bias = optional(c.mlp_bias, "mlp.down_proj.bias", hidden);
    w.q_norm = optional(c.qk_norm, "self_attn.q_norm.weight", head_dim);
    w.k_norm = optional(c.qk_norm, "self_attn.k_norm.weight", head_dim);
    layers_.push_back(w);
    // Older exports save RoPE's inverse frequencies; they are recomputed from the config.
    if (ck.contains(p + "self_attn.rotary_emb.inv_freq")) get(p + "self_attn.rotary_emb.inv_freq", {head_dim / 2});
  }
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
    // Hugging Face ties the head to the embedding, so a saved copy must be that copy.
    if (ck.contains("lm_head.weight")) {
      const TensorView& head = *get("lm_head.weight", {vocab, hidden});
      SPECULA_CHECK(head.dtype == embed_->dtype && std::memcmp(head.data, embed_->data, static_cast<std::size_t>(head.numel()) * dtype_size(head.dtype)) == 0,
                    head.origin, ": tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but config.json "
                    "has tie_word_embeddings = true");
    }
  } else {
    lm_head_ = get("lm_head.weight", {vocab, hidden});
  }
  for (const auto& [name, tensor] : ck.tensors()) {
    SPECULA_CHECK(used.count(name) != 0, tensor->origin, ": unknown tensor '", name,
                  "': this model type and config do not use it (an unsupported architecture or config?)");
  }
}

}  // namespace specula
