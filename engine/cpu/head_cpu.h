// defines: HeadCpuBackend, the EAGLE head seam (engine/head_backend.h) on the CPU for both
// head kinds: the head's matrices (and, for EAGLE-1, the target's lm_head) packed at load for
// the process's instruction set (weight_matrix.h, as stored), the head's step over a ragged
// batch with this folder's kernels; and HeadCpuWorkspace, its per-stream scratch.
#pragma once

#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/weight_matrix.h"
#include "engine/head_backend.h"

namespace specula::cpu {

// Activations of one head forward, resized per batch, reused across a stream's forwards.
struct HeadCpuWorkspace : Workspace {
  std::vector<float> a;                            // [num_rows, 2 x hidden] the concatenated input
  std::vector<float> h, q, k, v, attn, gate, up;   // [num_rows, width] each
  std::vector<float> last;                         // [num_logits, hidden] rows that want logits
  AttentionScratch attention;
};

class HeadCpuBackend : public HeadBackend {
 public:
  // Packs every matrix of `head` once, as stored, for `isa`; embeds with the head's
  // embedding, else `target`'s; an EAGLE-1 head also reads `target`'s final norm and lm_head.
  HeadCpuBackend(const HeadModel& head, const Model& target, MatmulIsa isa = matmul_isa());

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::unique_ptr<Workspace> make_workspace() const override { return std::make_unique<HeadCpuWorkspace>(); }
  void project(std::span<const float> taps, std::span<float> x, int n, Workspace& workspace) const override;
  void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
               std::span<const float> x, std::span<float> logits, std::span<float> out) const override;

 private:
  bool eagle1() const { return config().kind == HeadKind::kEagle1; }

  MatmulIsa isa_;
  const TensorView& embed_;
  WeightMatrix fc_, q_, k_, v_, o_, gate_, up_, down_, lm_head_;
  // [hidden] f32 copies. EAGLE-3: input_norm_, hidden_norm_, final_norm_ (the head's);
  // EAGLE-1: fc_bias_ and final_norm_ (the target's, applied to the tapped state).
  std::vector<float> input_norm_, hidden_norm_, post_norm_, final_norm_, fc_bias_;
  float final_norm_eps_;
  RopeTable rope_;
};

}  // namespace specula::cpu
