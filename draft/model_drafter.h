// defines: TreeShape and ModelDrafter, the draft-model proposer: a chain of gamma tokens,
// a static tree from a branching list (3,2,1,1: three children of the root, two under
// each, ...) or a dynamic tree grown best-first by cumulative draft probability under a
// node budget (in the spirit of EAGLE-2). The draft runs on its own paged cache with the
// same tree-masked forward as the target, one forward per tree level, and catches up on
// accepted-but-unfed tokens and the bonus token at the next step.
#pragma once

#include <functional>
#include <vector>

#include "draft/drafter.h"
#include "engine/model.h"

namespace specula {

struct TreeShape {
  std::vector<int> branching;  // static tree (a chain of gamma is gamma ones); empty when dynamic
  int dynamic_budget = 0;      // > 0: dynamic tree of this many nodes
  int dynamic_top_k = 4;       // dynamic: children considered per expanded node
  int dynamic_width = 4;       // dynamic: nodes added (and fed to the draft) per round
  bool adaptive = false;       // chains only: grow gamma on full acceptance, shrink on early rejection
};

// The transform from draft logits to the distribution proposals are drawn from (for
// deterministic top-k proposals, any transform that keeps the logits' order will do).
//   logits: in [vocab]; probs: out [vocab]
using DistributionFn = std::function<void(std::span<const float> logits, std::span<float> probs)>;

class ModelDrafter : public Drafter {
 public:
  static constexpr int kMaxAdaptiveGamma = 16;  // adaptive chains grow up to this length

  // `seq` is this drafter's sequence in `cache` (it owns it and frees it on destruction);
  // it holds a prefix of the committed tokens. `stochastic`: siblings are sampled from
  // `distribution` (chains i.i.d., static trees without replacement) and q is returned;
  // otherwise proposals are the deterministic top-k of `distribution`.
  ModelDrafter(Model& draft, PagedKvCache& cache, PagedKvCache::SeqId seq, DistributionFn distribution,
               bool stochastic, TreeShape shape);
  ~ModelDrafter() override;
  ModelDrafter(const ModelDrafter&) = delete;
  ModelDrafter& operator=(const ModelDrafter&) = delete;

  Proposal propose(std::span<const int> committed, int max_depth, Philox& rng) override;
  void accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int> committed) override;

  int draft_forwards() const { return forwards_; }
  PagedKvCache::SeqId seq() const { return seq_; }

 private:
  // Feeds the tree's nodes [first, last) to the draft (one forward), appending q rows.
  void feed(const TokenTree& tree, int first, int last, int root_position, std::vector<float>& q);
  void grow_static(Proposal& proposal, std::span<const int> branching, int root_position, Philox& rng);
  void grow_dynamic(Proposal& proposal, int max_depth, int root_position);

  Model& draft_;
  PagedKvCache& cache_;
  PagedKvCache::SeqId seq_;
  DistributionFn distribution_;
  bool stochastic_;
  TreeShape shape_;
  int gamma_;                // current chain length (adaptive), else the branching depth
  int prefix_end_ = 0;       // cache length before the last proposal's tree nodes
  int fed_nodes_ = 0;        // nodes of the last proposal fed to the draft (a prefix of node order)
  int forwards_ = 0;
  std::vector<float> logits_;
};

}  // namespace specula
