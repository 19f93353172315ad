#include "engine/model.h"

#include <filesystem>

namespace specula {

Model::Model(const std::string& dir)
    : dir_(dir),
      config_(load_model_config((std::filesystem::path(dir) / "config.json").string())),
      checkpoint_(std::make_unique<Checkpoint>(dir)),
      tokenizer_(std::make_unique<Tokenizer>(Tokenizer::load(dir, config_.vocab_size))) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size, kv = c.kv_dim(), vocab = c.vocab_size;
  const Checkpoint& ck = *checkpoint_;
  embed_ = &ck.get("model.embed_tokens.weight", {vocab, hidden});
  final_norm_ = &ck.get("model.norm.weight", {hidden});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layers_.push_back(LayerWeights{&ck.get(p + "self_attn.q_proj.weight", {hidden, hidden}),
                                   &ck.get(p + "self_attn.k_proj.weight", {kv, hidden}),
                                   &ck.get(p + "self_attn.v_proj.weight", {kv, hidden}),
                                   &ck.get(p + "self_attn.o_proj.weight", {hidden, hidden}),
                                   &ck.get(p + "mlp.gate_proj.weight", {ffn, hidden}),
                                   &ck.get(p + "mlp.up_proj.weight", {ffn, hidden}),
                                   &ck.get(p + "mlp.down_proj.weight", {hidden, ffn}),
                                   &ck.get(p + "input_layernorm.weight", {hidden}),
                                   &ck.get(p + "post_attention_layernorm.weight", {hidden})});
  }
  lm_head_ = &ck.get(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", {vocab, hidden});
}

}  // namespace specula
