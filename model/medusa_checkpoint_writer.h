// defines: write_random_medusa, Medusa heads (model/medusa_model.h) with random weights for a
// given target config in FasterDecoding's layout: tests of loading and running them need no
// download.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "model/model_config.h"

namespace specula {

struct RandomMedusa {
  int num_heads = 3;   // medusa_num_heads
  int num_layers = 1;  // medusa_num_layers
  DType dtype = DType::F32;
  uint64_t seed = 0;
  float weight_std = 0.02f;  // of every matrix and bias
};

// Writes config.json (with hidden_size and vocab_size, the target's) and model.safetensors
// into `dir` (created if missing; a folder that already holds either file is refused). Each
// tensor's values depend only on the seed, its head, its block and its kind.
void write_random_medusa(const std::string& dir, const ModelConfig& target, const RandomMedusa& options);

}  // namespace specula
