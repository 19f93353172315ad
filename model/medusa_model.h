// defines: MedusaConfig and MedusaModel, Medusa draft heads as FasterDecoding writes them,
// loaded from a folder and validated against the target's ModelConfig: config.json
// `medusa_num_heads` (K) and `medusa_num_layers` (R), optional `hidden_size` / `vocab_size`
// (the target's); model.safetensors with, for head i < K, `medusa_head.{i}.{j}.linear.weight`
// [H, H] and `.bias` [H] for j < R (ResBlocks: x + SiLU(W x + b)), then
// `medusa_head.{i}.{R}.weight` [vocab, H] (no bias). Every tensor the config implies is named,
// any other is an error. Head i reads the target's last hidden state after its final norm at
// position p and predicts the token at p + i + 2. It computes nothing: a MedusaBackend
// (engine/medusa_backend.h) runs it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"

namespace specula {

struct MedusaConfig {
  int num_heads = 0;    // K: head i proposes depth i + 1 below the root
  int num_layers = 0;   // R: ResBlocks per head
  int hidden_size = 0;  // the target's hidden size
  int vocab_size = 0;   // the target's vocabulary
};

class MedusaModel {
 public:
  struct ResBlock {
    const TensorView* weight = nullptr;  // [H, H]
    const TensorView* bias = nullptr;    // [H]
  };
  struct Head {
    std::vector<ResBlock> blocks;        // [R]
    const TensorView* lm_head = nullptr;  // [vocab, H]
  };

  // Loads config.json and the safetensors weights in `dir`, validated against `target`.
  // Throws SpeculaError naming the file and the key or tensor, with both values where two
  // disagree; a folder with only pytorch_model.bin is told to convert it to safetensors.
  MedusaModel(const std::string& dir, const ModelConfig& target);

  const std::string& dir() const { return dir_; }
  const MedusaConfig& config() const { return config_; }
  const std::vector<Head>& heads() const { return heads_; }

 private:
  std::string dir_;
  MedusaConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::vector<Head> heads_;
};

}  // namespace specula
