// defines: MedusaBackend, the engine seam of Medusa heads (model/medusa_model.h): the target's
// final norm over the target's last pre-norm hidden states, then every head's ResBlocks and
// its lm_head, giving each row's K logit rows; MedusaTree and plan_medusa_draws, the trees a
// device draws from those rows and leaves there for the target's verification
// (MedusaBackend::enqueue_draws); and make_medusa_backend, the name -> implementation choice.
// No CUDA or cpu:: type appears here.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/device_draft.h"
#include "model/medusa_model.h"
#include "model/model.h"

namespace specula {

// A chain or static tree drawn whole from one row's heads on a device: node i (under parents[i],
// -1 the root; a chain's node i under i - 1) is a child of its parent's context, and a context
// at depth d (the root's 0) draws its children from head d's distribution under `options`, by
// `mode` (kDraw*: a chain's one child kDrawSampled, or kDrawTopK where greedy), child i with
// uniforms[i] (unread for kDrawTopK). Parents in growth order: each level after the one above,
// its nodes in their parents' order (TreeGrowth::device_shape).
struct MedusaTree {
  int length = 0;                    // nodes, >= 1
  DrawOptions options;
  std::span<const int> parents;      // in [length], or empty for a chain
  int mode = kDrawTopK;
  std::span<const double> uniforms;  // in [length], or empty where mode is kDrawTopK
  bool sampled() const { return mode != kDrawTopK; }
};

// The draws of trees[r] over row r of a heads forward of `heads` heads, as a device makes them:
// every context with children (a tree's root, and each node with children) is a logit row, a
// copy of its head's row under its options, whose children are consecutive draws in node order;
// contexts run level by level (depth 0 of every tree, then depth 1, ...), so that a context's
// source, the draw of the node it follows, belongs to a level drawn before it.
struct MedusaDrawPlan {
  std::vector<int> context_rows;          // [contexts] the forward's logit row (r * heads + depth) each reads
  std::vector<DrawOptions> options;       // [contexts]
  std::vector<int> child_first;           // [contexts + 1] context c draws draws [child_first[c], child_first[c + 1])
  std::vector<int> modes;                 // [contexts] kDraw*
  std::vector<int> sources;               // [contexts] the draw of the node a context follows, -1 for a root
  std::vector<double> uniforms;           // [draws] 0 where unread
  std::vector<int> draw_rows;             // [draws] the context each draw is drawn from
  std::vector<std::vector<int>> draw_of;  // [trees][length] each node's draw
  std::vector<int> level_first;           // [levels + 1] contexts of depth d: [level_first[d], level_first[d + 1])
  bool keep_q = false;                    // a tree is sampled: the contexts' distributions stay for verification
  int contexts() const { return static_cast<int>(context_rows.size()); }
  int draws() const { return static_cast<int>(draw_rows.size()); }
};

// Throws SpeculaError naming the tree and node unless every tree is well formed (length >= 1,
// parents in growth order, a context deeper than `heads` - 1 has no children, a kDraw* mode, a
// chain's mode kDrawSampled or kDrawTopK, uniforms in [0, 1) where sampled, options in range).
MedusaDrawPlan plan_medusa_draws(std::span<const MedusaTree> trees, int heads);

// Trees drawn and left on a device (MedusaBackend::enqueue_draws).
struct EnqueuedDraws {
  std::shared_ptr<const DeviceDraws> draws;
  std::vector<std::vector<int>> draw_of;  // [tree][its length] each node's draw
};

class MedusaBackend {
 public:
  virtual ~MedusaBackend() = default;

  virtual BackendKind kind() const = 0;
  const MedusaModel& medusa() const { return medusa_; }
  const MedusaConfig& config() const { return medusa_.config(); }
  virtual std::unique_ptr<Workspace> make_workspace() const = 0;

  // The first `heads` heads (1..num_heads) over n rows (batch invariant: a row's results
  // depend on that row alone; a head's do not depend on how many run).
  //   states: in  [n, hidden] the target's last hidden states BEFORE its final norm (the
  //           state at tap layer num_hidden_layers), which this applies
  //   logits: out [n, heads, vocab] head i's logits of row r at [r, i]
  virtual void forward(std::span<const float> states, int n, int heads, Workspace& workspace,
                       std::span<float> logits) const = 0;

  // Whether enqueue_draws draws on a device (the CUDA backend's; the CPU backend refuses it).
  virtual bool drafts_on_device() const { return false; }
  // forward()'s heads over n rows, then trees[r] (one a row) drawn from row r's heads
  // (plan_medusa_draws) and left on the device with their distributions where sampled, for a
  // forward_verify of the target there (DeviceVerify::draws). Nothing comes back and nothing
  // waits; the draws stay valid until the next enqueue_draws on `workspace`.
  //   states: in [n, hidden] as forward()'s
  virtual EnqueuedDraws enqueue_draws(std::span<const float> states, int n, int heads,
                                      std::span<const MedusaTree> trees, Workspace& workspace) const;

 protected:
  explicit MedusaBackend(const MedusaModel& medusa) : medusa_(medusa) {}

 private:
  const MedusaModel& medusa_;
};

// `medusa` on backend `kind`, applying `target`'s final norm (the model it was loaded against:
// its hidden and vocabulary sizes are checked). Both must outlive the backend. On the CUDA
// backend (engine/cuda/head_cuda.h) the matrices are bf16, as the CUDA model backend's.
std::unique_ptr<MedusaBackend> make_medusa_backend(BackendKind kind, const MedusaModel& medusa, const Model& target);

}  // namespace specula
