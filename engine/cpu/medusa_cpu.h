// defines: MedusaCpuBackend, the Medusa seam (engine/medusa_backend.h) on the CPU: the heads'
// matrices packed at load for the process's instruction set (weight_matrix.h, as stored), the
// target's final norm, ResBlocks and lm_heads with this folder's kernels; and
// MedusaCpuWorkspace, its per-stream scratch.
#pragma once

#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/weight_matrix.h"
#include "engine/medusa_backend.h"

namespace specula::cpu {

struct MedusaCpuWorkspace : Workspace {
  std::vector<float> normed;  // [n, hidden] the target's final norm of the states
  std::vector<float> x, y;    // [n, hidden] a head's stream and one block's product
  std::vector<float> logits;  // [n, vocab] one head's logits
};

class MedusaCpuBackend : public MedusaBackend {
 public:
  // Packs every matrix of `medusa` once, as stored, for `isa`; `final_norm` ([hidden]) and
  // `eps` are the target's.
  MedusaCpuBackend(const MedusaModel& medusa, const TensorView& final_norm, float eps, MatmulIsa isa = matmul_isa());

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::unique_ptr<Workspace> make_workspace() const override { return std::make_unique<MedusaCpuWorkspace>(); }
  void forward(std::span<const float> states, int n, int heads, Workspace& workspace,
               std::span<float> logits) const override;

 private:
  struct Block {
    WeightMatrix weight;
    std::vector<float> bias;  // [hidden] f32 copy
  };
  struct Head {
    std::vector<Block> blocks;
    WeightMatrix lm_head;
  };
  std::vector<Head> heads_;
  std::vector<float> final_norm_;  // [hidden] f32 copy
  float eps_;
};

}  // namespace specula::cpu
