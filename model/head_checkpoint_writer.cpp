#include "model/head_checkpoint_writer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/rng.h"
#include "model/checkpoint_writer.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What each tensor of a head is; its index is the tensor's random stream, the same in both layouts.
enum Role {
  kFc, kQ, kK, kV, kO, kGate, kUp, kDown, kInputNorm, kHiddenNorm, kPostNorm, kNorm, kLmHead, kEmbed, kD2t, kT2d,
  kFcBias
};

struct HeadTensor {
  Role role;
  TensorSpec spec;
};

// The head's decoder layer: the requested shape as a one-layer LLaMA over the target's vocabulary.
ModelConfig layer_shape(const ModelConfig& target, const RandomHead& o) {
  ModelConfig l = o.layer.value_or(target);
  l.family = ModelFamily::kLlama;
  l.num_hidden_layers = 1;
  l.attention_bias = l.o_bias = l.mlp_bias = l.qk_norm = false;
  l.sliding_window = 0;
  l.tie_word_embeddings = false;
  l.vocab_size = target.vocab_size;
  l.bos_token_id = target.bos_token_id;
  l.eos_token_ids = target.eos_token_ids;
  l.eos_token_id = target.eos_token_id;
  return l;
}

// The target id of each draft id: the given ones, or draft_vocab distinct ids drawn from the seed, ascending.
std::vector<int> draft_ids(const ModelConfig& target, const RandomHead& o, int draft_vocab) {
  if (!o.draft_to_target.empty()) return o.draft_to_target;
  std::vector<int> ids(static_cast<std::size_t>(target.vocab_size));
  for (int i = 0; i < target.vocab_size; ++i) ids[i] = i;
  Philox rng(o.seed, 1000);
  for (int i = 0; i < draft_vocab; ++i) {  // partial Fisher-Yates
    const int j = i + static_cast<int>(rng.uniform() * (target.vocab_size - i));
    std::swap(ids[i], ids[j]);
  }
  ids.resize(static_cast<std::size_t>(draft_vocab));
  std::sort(ids.begin(), ids.end());
  return ids;
}

json config_json(const ModelConfig& target, const ModelConfig& layer, const RandomHead& o, int draft_vocab) {
  json l = json::parse(checkpoint_config_json(layer, o.dtype));
  if (o.kind == HeadKind::kEagle1) {
    l["architectures"] = {"LlamaForCausalLM"};
    return l;
  }
  if (o.layout == HeadLayout::kEagle) {
    l["architectures"] = {"LlamaForCausalLMEagle3"};
    l["draft_vocab_size"] = draft_vocab;
    l["target_hidden_size"] = target.hidden_size;
    if (o.norm_before_residual) l["norm_before_residual"] = true;
    if (!o.tap_ids.empty())
      l["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", o.tap_ids}, {"use_aux_hidden_state", true}};
    return l;
  }
  l.erase("architectures");
  json j = {{"architectures", {"Eagle3Speculator"}},
            {"speculators_model_type", "eagle3"},
            {"speculators_version", "0.1.0"},
            {"draft_vocab_size", draft_vocab},
            {"norm_before_residual", o.norm_before_residual},
            {"target_hidden_size", target.hidden_size},
            {"transformer_layer_config", l},
            {"speculators_config",
             {{"algorithm", "eagle3"},
              {"default_proposal_method", "greedy"},
              {"proposal_methods", {{{"proposal_type", "greedy"}, {"speculative_tokens", 5}}}},
              {"verifier", {{"architectures", {"LlamaForCausalLM"}}, {"name_or_path", "random"}}}}}};
  if (!o.tap_ids.empty()) j["eagle_aux_hidden_state_layer_ids"] = o.tap_ids;
  return j;
}

}  // namespace

void write_random_head(const std::string& dir, const ModelConfig& target, const RandomHead& o) {
  const ModelConfig layer = layer_shape(target, o);
  parse_model_config(checkpoint_config_json(layer, o.dtype), "the requested head layer");  // names the offending key
  SPECULA_CHECK(o.weight_std > 0, "the weights' standard deviation must be positive, got ", o.weight_std);
  const bool eagle1 = o.kind == HeadKind::kEagle1;
  SPECULA_CHECK(!eagle1 || (o.layout == HeadLayout::kEagle && o.draft_vocab == 0 && o.draft_to_target.empty() &&
                            o.tap_ids.empty() && !o.norm_before_residual),
                "an EAGLE-1 head has the EAGLE reference layout, the target's vocabulary and no taps");
  const int draft_vocab = o.draft_vocab > 0 ? o.draft_vocab
                          : o.draft_to_target.empty() ? target.vocab_size
                                                      : static_cast<int>(o.draft_to_target.size());
  const bool maps = draft_vocab != target.vocab_size || !o.draft_to_target.empty();
  const std::vector<int> ids = maps ? draft_ids(target, o, draft_vocab) : std::vector<int>{};
  SPECULA_CHECK(!maps || static_cast<int>(ids.size()) == draft_vocab, "draft_to_target has ", ids.size(),
                " ids for a draft vocabulary of ", draft_vocab);
  const int taps = o.tap_ids.empty() ? 3 : static_cast<int>(o.tap_ids.size());

  const int64_t hidden = layer.hidden_size, ffn = layer.intermediate_size, q_dim = layer.q_dim(), kv = layer.kv_dim();
  const int64_t vocab = target.vocab_size;
  const std::string p = o.layout == HeadLayout::kEagle && !eagle1 ? "midlayer." : "layers.0.";
  const int64_t attn_in = eagle1 ? hidden : 2 * hidden;
  std::vector<HeadTensor> tensors = {
      {kFc, {"fc.weight", o.dtype, {hidden, eagle1 ? 2 * hidden : taps * int64_t(target.hidden_size)}}},
      {kQ, {p + "self_attn.q_proj.weight", o.dtype, {q_dim, attn_in}}},
      {kK, {p + "self_attn.k_proj.weight", o.dtype, {kv, attn_in}}},
      {kV, {p + "self_attn.v_proj.weight", o.dtype, {kv, attn_in}}},
      {kO, {p + "self_attn.o_proj.weight", o.dtype, {hidden, q_dim}}},
      {kPostNorm, {p + "post_attention_layernorm.weight", o.dtype, {hidden}}},
      {kGate, {p + "mlp.gate_proj.weight", o.dtype, {ffn, hidden}}},
      {kUp, {p + "mlp.up_proj.weight", o.dtype, {ffn, hidden}}},
      {kDown, {p + "mlp.down_proj.weight", o.dtype, {hidden, ffn}}}};
  if (eagle1) {
    tensors.push_back({kFcBias, {"fc.bias", o.dtype, {hidden}}});
  } else {
    tensors.push_back({kInputNorm, {p + "input_layernorm.weight", o.dtype, {hidden}}});
    tensors.push_back({kHiddenNorm, {p + "hidden_norm.weight", o.dtype, {hidden}}});
    tensors.push_back({kNorm, {"norm.weight", o.dtype, {hidden}}});
    tensors.push_back({kLmHead, {"lm_head.weight", o.dtype, {draft_vocab, hidden}}});
  }
  if (o.embed) tensors.push_back({kEmbed, {"embed_tokens.weight", o.dtype, {vocab, hidden}}});
  if (maps) tensors.push_back({kD2t, {"d2t", o.dtype, {draft_vocab}, IndexTensorView::Type::kI64}});
  if (maps && o.t2d) tensors.push_back({kT2d, {"t2d", o.dtype, {vocab}, IndexTensorView::Type::kBool}});

  fs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors"})
    SPECULA_CHECK(!fs::exists(fs::path(dir) / file), dir, " already holds ", file,
                  "; choose an empty folder (nothing is overwritten)");
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << config_json(target, layer, o, draft_vocab).dump(2) << '\n';
    SPECULA_CHECK(out.good(), dir, "/config.json: write failed");
  }
  std::vector<TensorSpec> specs;
  for (const HeadTensor& t : tensors) specs.push_back(t.spec);
  const float half_width = o.weight_std * std::sqrt(3.0f);  // uniform with standard deviation weight_std
  write_safetensors((fs::path(dir) / "model.safetensors").string(), specs,
                    [&](std::size_t index, std::span<unsigned char> bytes) {
                      const Role role = tensors[index].role;
                      if (role == kD2t) {
                        for (std::size_t i = 0; i < ids.size(); ++i) {
                          const int64_t offset = int64_t(ids[i]) - int64_t(i);
                          std::memcpy(&bytes[8 * i], &offset, 8);
                        }
                        return;
                      }
                      if (role == kT2d) {
                        for (int id : ids)
                          if (id >= 0 && id < vocab) bytes[static_cast<std::size_t>(id)] = 1;
                        return;
                      }
                      const bool norm = role == kInputNorm || role == kHiddenNorm || role == kPostNorm || role == kNorm;
                      const std::size_t es = dtype_size(o.dtype);
                      const Philox rng(o.seed, static_cast<uint64_t>(role));
                      std::array<uint32_t, 4> block{};
                      for (std::size_t i = 0; i < bytes.size() / es; ++i) {
                        if (i % 4 == 0) block = rng.block(i / 4);
                        // 24 random bits of the block's lane i % 4 -> uniform in [-1, 1).
                        const float u = 2.0f * static_cast<float>(block[i % 4] >> 8) / 16777216.0f - 1.0f;
                        store_value(norm ? 1.0f + 0.5f * u : half_width * u, o.dtype, &bytes[i * es]);
                      }
                    });
}

}  // namespace specula
