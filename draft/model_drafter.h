// defines: DistributionFn and ModelDrafter, the draft-model proposer: a static tree of any
// topology (a chain of gamma tokens, a branching list, a Sequoia tree: draft/tree_topology.h,
// draft/sequoia_tree.h) or a dynamic tree grown best-first by cumulative draft probability
// under a node budget (draft/tree_growth.h). The draft runs on its own paged cache with the
// same tree-masked forward as the target, one forward per tree level, each handed out
// through Drafter::pending_forward() (so many sequences' levels can run as one batch), and
// catches up on accepted-but-unfed tokens and the bonus token at the next step.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "draft/drafter.h"
#include "draft/tree_growth.h"
#include "sampling/logit_controls.h"

namespace specula {

// The transform from draft logits to the distribution proposals are drawn from (for
// deterministic top-k proposals, any transform that keeps the logits' order will do).
//   logits: in [vocab]; probs: out [vocab]
using DistributionFn = std::function<void(std::span<const float> logits, std::span<float> probs)>;

class ModelDrafter : public Drafter {
 public:
  static constexpr int kMaxAdaptiveGamma = TreeGrowth::kMaxAdaptiveGamma;

  // `seq` is this drafter's sequence in draft.cache (it owns it and frees it on destruction);
  // it holds a prefix of the committed tokens. `stochastic`: siblings are sampled from
  // `distribution` (chains i.i.d., static trees without replacement) and q is returned;
  // otherwise proposals are the deterministic top-k of `distribution`. `controls` edit each
  // row over the committed tokens and the row's own path before `distribution` reads it.
  // `device`: the options `distribution` applies, as the draft backend's device draws with
  // them (greedy when !stochastic); where given and the backend drafts on its device, a
  // proposal that its device may draw whole (TreeGrowth::device_shape: a chain, with or
  // without siblings, a static tree, a dynamic tree) is drawn there (device_chain()), its
  // uniforms drawn from the rng up front (TreeGrowth::device_uniforms), its rows edited there
  // by the controls (RowControls::path_edits) where they are active — then not for a dynamic
  // tree, nor under no_repeat_ngram_size.
  ModelDrafter(const ForwardContext& draft, KvCache::SeqId seq, DistributionFn distribution, bool stochastic,
               TreeShape shape, RowControls controls = {}, std::optional<DrawOptions> device = std::nullopt);
  ~ModelDrafter() override;
  ModelDrafter(const ModelDrafter&) = delete;
  ModelDrafter& operator=(const ModelDrafter&) = delete;

  void start(std::span<const int> committed, DraftBound bound, Philox& rng) override;
  const SequenceRows* pending_forward() override { return pending_ ? &*pending_ : nullptr; }
  void forward_done(std::span<const float> logits) override;
  int catch_up_rows(int committed) const override { return std::max(0, committed - draft_.cache.length(seq_) - 1); }
  const ForwardContext* forward_context() const override { return &draft_; }
  const DeviceChain* device_chain() const override { return device_chain_ ? &*device_chain_ : nullptr; }
  void chain_drawn(std::span<const int> tokens, std::span<const int> parents, std::span<const float> q) override;
  void chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws) override;
  bool drawn_on_device() const override { return drawn_on_device_; }
  Proposal take_proposal() override;
  void accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int> committed) override;

  int draft_forwards() const { return forwards_; }
  int gamma() const { return growth_.gamma(); }  // the chain length the next proposal starts from
  KvCache::SeqId seq() const { return seq_; }

 private:
  int vocab() const { return draft_.backend.config().vocab_size; }
  // The device chain done: the proposal is complete.
  void end_device_chain();
  // Asks for the forward of the growth's pending feed, if any.
  void request_feed();
  // q of `context` (0: the root, 1 + i: after node i) from its draft logits, edited by
  // controls_, appended to the proposal's q.
  void context_distribution(std::span<const float> logits, int context);

  ForwardContext draft_;
  KvCache::SeqId seq_;
  DistributionFn distribution_;
  RowControls controls_;
  TreeGrowth growth_;
  int forwards_ = 0;

  // The proposal in progress.
  bool catching_up_ = false;
  int root_position_ = 0;
  int prefix_end_ = 0;              // cache length before the proposal's tree nodes
  std::span<const int> committed_;  // the tokens start() was given (valid until the proposal is taken)
  std::vector<float> edited_;       // a row edited by controls_
  std::vector<int> path_;           // a context's path tokens
  std::optional<SequenceRows> pending_;
  std::vector<int> pending_positions_;
  std::optional<DrawOptions> device_options_;
  TreeGrowth::DeviceShape device_shape_;     // this proposal's on the device, when its device draws it
  std::optional<DeviceChain> device_chain_;  // the chain drawing it
  bool drawn_on_device_ = false;             // this proposal was drawn there
  std::vector<double> device_uniforms_;      // [its nodes] where sampled
  std::vector<int> device_nodes_;            // [proposal nodes] each node's row in the device's rows, else empty
  PathEdits path_edits_;                     // the device chain's controls, where active
};

}  // namespace specula
