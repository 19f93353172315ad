// defines: Eagle3CpuBackend, the EAGLE-3 head seam (engine/head_backend.h) on the CPU: the
// head's matrices packed at load for the process's instruction set (weight_matrix.h, as
// stored), fc and the decoder layer over a ragged batch with this folder's kernels; and
// Eagle3CpuWorkspace, its per-stream scratch.
#pragma once

#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/weight_matrix.h"
#include "engine/head_backend.h"

namespace specula::cpu {

// Activations of one head forward, resized per batch, reused across a stream's forwards.
struct Eagle3CpuWorkspace : Workspace {
  std::vector<float> a;                            // [num_rows, 2 x hidden] the attention input
  std::vector<float> h, q, k, v, attn, gate, up;   // [num_rows, width] each
  std::vector<float> last;                         // [num_logits, hidden] rows that want logits
  AttentionScratch attention;
};

class Eagle3CpuBackend : public HeadBackend {
 public:
  // Packs every matrix of `head` once, as stored, for `isa`; embeds with the head's
  // embedding, else `target_embedding` ([vocab, hidden]).
  Eagle3CpuBackend(const HeadModel& head, const TensorView& target_embedding, MatmulIsa isa = matmul_isa());

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::unique_ptr<Workspace> make_workspace() const override { return std::make_unique<Eagle3CpuWorkspace>(); }
  void project(std::span<const float> taps, std::span<float> x, int n) const override;
  void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
               std::span<const float> x, std::span<float> logits, std::span<float> out) const override;

 private:
  MatmulIsa isa_;
  const TensorView& embed_;
  WeightMatrix fc_, q_, k_, v_, o_, gate_, up_, down_, lm_head_;
  std::vector<float> input_norm_, hidden_norm_, post_norm_, final_norm_;  // [hidden] f32 copies
  RopeTable rope_;
};

}  // namespace specula::cpu
