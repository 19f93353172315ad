#include "engine/model.h"

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
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layers_.push_back(LayerWeights{get(p + "self_attn.q_proj.weight", {hidden, hidden}),
                                   get(p + "self_attn.k_proj.weight", {kv, hidden}),
                                   get(p + "self_attn.v_proj.weight", {kv, hidden}),
                                   get(p + "self_attn.o_proj.weight", {hidden, hidden}),
                                   get(p + "mlp.gate_proj.weight", {ffn, hidden}),
                                   get(p + "mlp.up_proj.weight", {ffn, hidden}),
                                   get(p + "mlp.down_proj.weight", {hidden, ffn}),
                                   get(p + "input_layernorm.weight", {hidden}),
                                   get(p + "post_attention_layernorm.weight", {hidden})});
    // Older exports save RoPE's inverse frequencies; they are recomputed from rope_theta.
    if (ck.contains(p + "self_attn.rotary_emb.inv_freq")) get(p + "self_attn.rotary_emb.inv_freq", {c.head_dim() / 2});
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
                  "': the implemented LLaMA-family layout does not use it (an unsupported architecture or config?)");
  }
}

}  // namespace specula
