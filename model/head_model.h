// defines: HeadKind, HeadLayout, HeadConfig and HeadModel, an EAGLE draft head as loaded from
// a Hugging Face folder and validated against its target's ModelConfig: its config, the
// memory-mapped weights (every tensor the kind and layout imply named, any other an error) and
// the draft-to-target vocabulary map. The layouts implemented:
//   EAGLE-3, kEagle        the EAGLE reference and SpecForge: config.json `architectures` =
//                          ["LlamaForCausalLMEagle3"] (or ["LlamaForCausalLM"] with `midlayer.*`
//                          tensors) with the Llama keys at the top level; tensors `midlayer.*`;
//                          tap layers in `eagle_config.eagle_aux_hidden_state_layer_ids` as
//                          OUTPUTS of target layers.
//   EAGLE-3, kSpeculators  vLLM's `speculators`: `speculators_model_type` = "eagle3", the Llama
//                          keys in `transformer_layer_config`; tensors `layers.0.*`; tap layers in
//                          `eagle_aux_hidden_state_layer_ids` as INPUTS of target layers.
//   EAGLE-1, kEagle        the EAGLE reference's EAGLE-1/EAGLE-2 heads: `architectures` =
//                          ["LlamaForCausalLM"], the Llama keys at the top level; tensors
//                          `fc.weight` [H, 2H], `fc.bias` and `layers.0.*` (no input_layernorm),
//                          no lm_head (the target's), no final norm; it reads the target's last
//                          hidden state after the target's final norm.
// Not implemented, refused by name: Medusa (its own loader), speculators' other types, PyTorch
// pickles. It computes nothing: a HeadBackend (engine/head_backend.h) runs it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kv/page_storage.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace specula {

// EAGLE-3: fc over several tapped target states, first draft step only; a decoder layer
// reading cat(input_layernorm(embedding), hidden_norm(x)); its own final norm and lm_head.
// EAGLE-1 (EAGLE-2's heads too): x = fc(cat(embedding, feature)) + bias every step, the
// feature being the target's normed last hidden state or the previous step's output; a decoder
// layer over x without input norm; the target's lm_head over its output, unnormed.
enum class HeadKind { kEagle3, kEagle1 };
enum class HeadLayout { kEagle, kSpeculators };

const char* head_kind_name(HeadKind kind);  // "EAGLE-3", "EAGLE-1"

const char* head_layout_name(HeadLayout layout);  // "EAGLE reference", "speculators (eagle3)"

struct HeadConfig {
  HeadKind kind = HeadKind::kEagle3;
  HeadLayout layout = HeadLayout::kEagle;
  // The decoder layer (one LLaMA layer whose attention reads 2 x hidden_size for EAGLE-3,
  // hidden_size for EAGLE-1): sizes, norm eps and RoPE, as the config's Llama keys give them
  // (num_hidden_layers is 1).
  ModelConfig layer;
  int draft_vocab_size = 0;    // rows of lm_head; draft_vocab_size key, else (EAGLE-1 always) the target's vocab
  int target_hidden_size = 0;  // width of one tapped target hidden state; the target's hidden size
  int target_layers = 0;       // the target's num_hidden_layers (tap layers lie in [0, target_layers])
  // The target hidden states HeadBackend::project reads, side by side in this order:
  // tap_layers[i] is the INPUT of target layer tap_layers[i] (tap_layers[i] == target_layers:
  // the last layer's output, before the final norm). EAGLE-1: {target_layers}.
  std::vector<int> tap_layers;
  bool norm_before_residual = false;  // EAGLE-3: the residual is hidden_norm(x) instead of x

  int hidden_size() const { return layer.hidden_size; }
  int num_taps() const { return static_cast<int>(tap_layers.size()); }
};

// The tap layers of a head whose config names none, as the EAGLE reference and vLLM tap a
// target of `num_layers` layers: inputs of layers 2, num_layers / 2 and num_layers - 3.
std::vector<int> default_tap_layers(int num_layers);

class HeadModel {
 public:
  // Loads config.json and the safetensors weights of a head of `kind` in `dir`, validated
  // against `target` (the config of the model it drafts for). Throws SpeculaError naming the
  // file and the key or tensor, with both values where two disagree; a head of the other kind
  // is refused naming the draft method that loads it, other head formats (Medusa,
  // speculators' other types) by name, and a folder with only pytorch_model.bin is told to
  // convert it to safetensors.
  HeadModel(const std::string& dir, const ModelConfig& target, HeadKind kind);

  const std::string& dir() const { return dir_; }
  const HeadConfig& config() const { return config_; }

  // Tensor views into the mapped checkpoint (H = hidden_size, Ht = target_hidden_size); a
  // pointer is null where the kind has no such tensor.
  // EAGLE-3: [H, num_taps * Ht] over the taps; EAGLE-1: [H, 2H] over cat(embedding, feature).
  const TensorView& fc() const { return *fc_; }
  const TensorView* fc_bias() const { return fc_bias_; }          // [H] EAGLE-1
  // The decoder layer: EAGLE-3's q, k, v [q_dim or kv_dim, 2H] read cat(input_layernorm(
  // embedding), hidden_norm(x)), EAGLE-1's [q_dim or kv_dim, H] read x (attn_norm null);
  // mlp_norm is post_attention_layernorm; no biases, no q/k norms (those pointers are null).
  const LayerWeights& layer() const { return layer_; }
  const TensorView* hidden_norm() const { return hidden_norm_; }  // [H] EAGLE-3
  const TensorView* final_norm() const { return final_norm_; }    // [H] EAGLE-3 `norm.weight`
  const TensorView* lm_head() const { return lm_head_; }          // [draft_vocab, H] EAGLE-3
  // [vocab, H] the head's own embedding; null when it has none (the target's is used).
  const TensorView* embed_tokens() const { return embed_; }
  // The stored maps, null when absent: d2t [draft_vocab] (target id = draft id + d2t[draft
  // id]), t2d [vocab] (true where a target id has a draft id).
  const IndexTensorView* d2t() const { return d2t_; }
  const IndexTensorView* t2d() const { return t2d_; }
  // [draft_vocab] the target id of each draft id, distinct, each in [0, vocab) (the identity
  // when the head has no d2t, which needs draft_vocab == vocab).
  const std::vector<int>& draft_to_target() const { return draft_to_target_; }

  // The head's KV cache: one layer of its own KV heads, f32 pages.
  KvLayout kv_layout(int block_size) const {
    const ModelConfig& l = config_.layer;
    return {1, l.num_key_value_heads, l.head_dim(), block_size, KvDType::kF32};
  }

 private:
  std::string dir_;
  HeadConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  const TensorView* fc_ = nullptr;
  const TensorView* fc_bias_ = nullptr;
  LayerWeights layer_;
  const TensorView* hidden_norm_ = nullptr;
  const TensorView* final_norm_ = nullptr;
  const TensorView* lm_head_ = nullptr;
  const TensorView* embed_ = nullptr;
  const IndexTensorView* d2t_ = nullptr;
  const IndexTensorView* t2d_ = nullptr;
  std::vector<int> draft_to_target_;
};

}  // namespace specula
