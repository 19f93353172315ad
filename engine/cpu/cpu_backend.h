// defines: CpuBackend, the engine seam (engine/backend.h) on the CPU: the matrices packed at
// load for the process's instruction set, quantised to int8 or in bf16dot's BF16
// (weight_matrix.h), the forward pass over a ragged batch with the kernels of this folder, and
// CpuWorkspace, its per-stream scratch.
#pragma once

#include <optional>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/weight_matrix.h"

namespace specula::cpu {

// Activations of one forward, resized per batch, reused across a stream's forwards.
struct CpuWorkspace : Workspace {
  std::vector<float> x, h, q, k, v, attn, gate, up;  // [num_rows, width] each
  std::vector<float> last;                            // [num_logits, hidden] rows that want logits
  AttentionScratch attention;
};

class CpuBackend : public Backend {
 public:
  // Packs every matrix of `model` once (in its dtype, converted to `matrices_as`, quantised for
  // int8, or in BF16 for the bf16dot (bf16amx) product for bf16dot (bf16amx, where this
  // process can run it, else an error saying why): the embedding lookup
  // still reads the stored table) for `isa` (the process's choice, matmul_isa(), unless a test
  // compares instruction sets).
  CpuBackend(const Model& model, std::optional<MatrixFormat> matrices_as, MatmulIsa isa = matmul_isa());

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::size_t weight_bytes() const override { return weight_bytes_; }
  std::unique_ptr<Workspace> make_workspace() const override { return std::make_unique<CpuWorkspace>(); }
  void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
               std::span<float> logits, const StateTaps& taps) const override;

 private:
  struct Layer {
    WeightMatrix q, k, v, o, gate, up, down;
    std::vector<float> attn_norm, mlp_norm;  // [hidden] f32 copies
    // f32 copies of the optional tensors (LayerWeights), empty when the model has none.
    std::vector<float> q_bias, k_bias, v_bias, o_bias, gate_bias, up_bias, down_bias, q_norm, k_norm;
  };

  MatmulIsa isa_;
  std::vector<Layer> layers_;
  std::unique_ptr<WeightMatrix> lm_head_;
  std::vector<float> final_norm_;
  RopeTable rope_;
  std::size_t weight_bytes_ = 0;
};

}  // namespace specula::cpu
