// defines: write_random_head, an EAGLE draft head with random weights for a given target
// config: EAGLE-3 in either published layout, EAGLE-1 in the EAGLE reference's
// (model/head_model.h). Tests of loading and running heads need no download.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "model/head_model.h"
#include "model/model_config.h"

namespace specula {

struct RandomHead {
  HeadKind kind = HeadKind::kEagle3;  // EAGLE-1: layout kEagle, no draft vocabulary, no taps
  HeadLayout layout = HeadLayout::kEagle;
  // The decoder layer's shape: hidden_size, intermediate_size, heads, KV heads, head_dim,
  // rms_norm_eps, rope_theta and rope_scaling are read from it (vocab and special ids are the
  // target's). nullopt: the target's.
  std::optional<ModelConfig> layer;
  int draft_vocab = 0;  // 0: the target's vocab_size (then no d2t / t2d are written)
  // The target id of each draft id, written to d2t as given (not checked, so that tests can
  // write broken maps); empty: draft_vocab distinct ids drawn from the seed, ascending.
  std::vector<int> draft_to_target;
  bool t2d = true;                    // write t2d (when d2t is written)
  bool embed = false;                 // write embed_tokens.weight [vocab, hidden]
  bool norm_before_residual = false;  // written as the config key when true
  // Tap layer ids in the layout's own convention (kEagle: outputs of target layers, under
  // eagle_config; kSpeculators: inputs of target layers), written as given; empty: no key.
  std::vector<int> tap_ids;
  DType dtype = DType::F32;
  uint64_t seed = 0;
  float weight_std = 0.02f;  // of every matrix; norms are 1 + uniform in [-0.5, 0.5)
};

// Writes config.json and model.safetensors of a head for `target` into `dir` (created if
// missing; a folder that already holds either file is refused). The weights depend only on
// (target, options minus layout): the two layouts of one seed hold equal tensors. Norm weights
// are 1 + uniform in [-0.5, 0.5), so that a norm applied in the wrong place shows.
void write_random_head(const std::string& dir, const ModelConfig& target, const RandomHead& options);

}  // namespace specula
