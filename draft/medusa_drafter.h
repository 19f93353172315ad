// defines: MedusaDrafter, the proposer that drafts with Medusa heads (model/medusa_model.h) on
// the target's last hidden state: a chain or a static tree at most num_heads deep, from one
// forward of the heads a step (one batched call for every sequence of a step: run_draft_forwards).
// Its step, for committed tokens t_0 .. t_{n-1} (t_{n-1} the
// root, not yet in the target's cache, which holds slots 0 .. n-2):
//   - the target cache's state of slot n-2 at tap layer num_hidden_layers (KvCache::
//     keep_states) goes through the heads once; head i's distribution (the sampler's
//     transform of its logits, under the request's controls) is q of every context at depth
//     i (the root's context is depth 0, so head 0 proposes the depth-1 nodes);
//   - the tree grows as a draft model's does (draft/tree_growth.h: children of a context drawn
//     from its q, greedy top-k, sampled chains i.i.d., static trees without replacement), each
//     feed it asks for answered with its nodes' depths' rows, no forward; a context at depth
//     num_heads is a leaf.
// With `device` draw options, on a backend that draws on its device, a plain chain or a static
// tree (no logit controls, no stop_below, no siblings) may instead be drawn whole there from the
// heads' row and left for the target's verification (medusa_device_tree, chain_left_on_device:
// the heads' draws of plan_medusa_draws, one uniform a node in node order, as the host grows it).
// It keeps no cache of its own and runs no forward per level; accept() has nothing to do.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "draft/drafter.h"
#include "draft/model_drafter.h"
#include "draft/tree_growth.h"
#include "engine/medusa_backend.h"
#include "kv/kv_cache.h"
#include "sampling/logit_controls.h"

namespace specula {

class MedusaDrafter : public Drafter {
 public:
  // The target's states of `target_seq` are read from `target_cache`, which keeps tap layer
  // `target_layers` (the target's num_hidden_layers) among its state layers. `stochastic`:
  // children are sampled from `distribution` and q is returned; otherwise they are its top-k.
  // A static shape must be at most num_heads deep. `device`: the device's chain under which
  // `distribution` is drawn (greedy, temperature 0, exactly when not `stochastic`); nullopt: the
  // host draws every proposal.
  MedusaDrafter(const MedusaBackend& medusa, Workspace& workspace, KvCache& target_cache, KvCache::SeqId target_seq,
                int target_layers, DistributionFn distribution, bool stochastic, TreeShape shape,
                RowControls controls = {}, std::optional<DrawOptions> device = std::nullopt);

  void start(std::span<const int> committed, DraftBound bound, Philox& rng) override;
  const MedusaRows* pending_medusa() const override { return pending_.backend ? &pending_ : nullptr; }
  void medusa_done(std::span<const float> logits) override;
  MedusaTree medusa_device_tree() override;
  void chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws) override;
  bool drawn_on_device() const override { return drawn_on_device_; }
  Proposal take_proposal() override;
  void accept(const TokenTree&, std::span<const int>, std::span<const int>) override {}

  int draft_forwards() const { return forwards_; }

 private:
  // Appends the q rows of contexts up to `context` (inclusive) that the proposal's q lacks.
  void fill_rows(int context);

  const MedusaBackend& medusa_;
  Workspace& workspace_;
  KvCache& target_cache_;
  KvCache::SeqId target_seq_;
  int state_offset_ = 0;  // floats before the last layer's state in a slot's states
  int shape_depth_ = 0;   // the tree shape's depth (a chain's: gamma)
  int heads_ = 0;         // heads run for the proposal in progress: the depths it can feed
  DistributionFn distribution_;
  RowControls controls_;
  TreeGrowth growth_;
  std::optional<DrawOptions> device_options_;
  int forwards_ = 0;

  // The proposal in progress.
  std::span<const int> committed_;
  TreeGrowth::DeviceShape device_shape_;      // the proposal as a device may draw it (off: none)
  std::vector<double> device_uniforms_;       // [its nodes] where sampled
  bool drawn_on_device_ = false;              // the proposal was left on the device
  std::vector<float> state_;                  // [hidden] the state the heads read
  MedusaRows pending_;                        // the heads forward, until it has run
  std::vector<float> logits_;                 // [heads_, vocab] the heads' logits of the root's state
  std::vector<std::vector<float>> depth_q_;   // [heads_][vocab or empty] q of a depth without controls
  std::vector<float> edited_;
  std::vector<int> path_;
};

}  // namespace specula
