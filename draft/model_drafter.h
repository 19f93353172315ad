// defines: TreeShape and ModelDrafter, the draft-model proposer: a static tree of any
// topology (a chain of gamma tokens, a branching list, a Sequoia tree: draft/tree_topology.h,
// draft/sequoia_tree.h) or a dynamic tree grown best-first by cumulative draft probability
// under a node budget (in the spirit of EAGLE-2). The draft runs on its own paged cache with the
// same tree-masked forward as the target, one forward per tree level, each handed out
// through Drafter::pending_forward() (so many sequences' levels can run as one batch), and
// catches up on accepted-but-unfed tokens and the bonus token at the next step.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "draft/drafter.h"
#include "draft/tree_topology.h"
#include "sampling/logit_controls.h"

namespace specula {

struct TreeShape {
  TreeTopology topology;       // static tree; empty when dynamic
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

  // `seq` is this drafter's sequence in draft.cache (it owns it and frees it on destruction);
  // it holds a prefix of the committed tokens. `stochastic`: siblings are sampled from
  // `distribution` (chains i.i.d., static trees without replacement) and q is returned;
  // otherwise proposals are the deterministic top-k of `distribution`. `controls` edit each
  // row over the committed tokens and the row's own path before `distribution` reads it.
  ModelDrafter(const ForwardContext& draft, KvCache::SeqId seq, DistributionFn distribution, bool stochastic,
               TreeShape shape, RowControls controls = {});
  ~ModelDrafter() override;
  ModelDrafter(const ModelDrafter&) = delete;
  ModelDrafter& operator=(const ModelDrafter&) = delete;

  void start(std::span<const int> committed, DraftBound bound, Philox& rng) override;
  const SequenceRows* pending_forward() override { return pending_ ? &*pending_ : nullptr; }
  void forward_done(std::span<const float> logits) override;
  int catch_up_rows(int committed) const override { return std::max(0, committed - draft_.cache.length(seq_) - 1); }
  const ForwardContext* forward_context() const override { return &draft_; }
  Proposal take_proposal() override;
  void accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int> committed) override;

  int draft_forwards() const { return forwards_; }
  int gamma() const { return gamma_; }  // the chain length the next proposal starts from
  KvCache::SeqId seq() const { return seq_; }

 private:
  enum class Phase { kIdle, kCatchUp, kStatic, kDynamic, kDone };
  struct Candidate {
    double score;  // cumulative log draft probability of the path
    long order;    // push order: ties go to the earlier (more probable sibling first)
    int parent;
    int token;
    bool operator<(const Candidate& o) const { return score < o.score || (score == o.score && order > o.order); }
  };

  int vocab() const { return draft_.backend.config().vocab_size; }
  // Asks for a forward of the tree's nodes [first, last) (their q rows come back in forward_done).
  void request_feed(int first, int last);
  // Grows the tree until it needs a forward (pending_ set) or is complete (phase kDone).
  void advance_static();
  void advance_dynamic();
  // Appends up to siblings_ other candidates for a finished chain's first token, within
  // max_nodes_ nodes in all (0: no bound).
  void add_siblings();
  void push_children(int context, double base);
  // q of `context` (0: the root, 1 + i: after node i) from its draft logits, edited by controls_.
  void context_distribution(std::span<const float> logits, int context, std::span<float> q);

  ForwardContext draft_;
  KvCache::SeqId seq_;
  DistributionFn distribution_;
  RowControls controls_;
  bool stochastic_;
  TreeShape shape_;
  int gamma_;                // current chain length (adaptive), else the topology's depth
  int forwards_ = 0;

  // The proposal in progress.
  Phase phase_ = Phase::kIdle;
  Philox* rng_ = nullptr;
  int max_depth_ = 0;
  double stop_below_ = 0;    // DraftBound::stop_below
  int siblings_ = 0;         // DraftBound::siblings
  int max_nodes_ = 0;        // DraftBound::max_nodes
  double confidence_ = 1;    // a chain's product of its tokens' draft probabilities so far
  int root_position_ = 0;
  int prefix_end_ = 0;       // cache length before the proposal's tree nodes
  int fed_nodes_ = 0;        // nodes fed to the draft (a prefix of node order)
  int feeding_first_ = 0, feeding_last_ = 0;  // the nodes of the pending feed
  Proposal proposal_;
  std::span<const int> committed_;  // the tokens start() was given (valid until the proposal is taken)
  std::vector<float> edited_;       // a row edited by controls_
  std::vector<int> path_;           // a context's path tokens
  std::optional<SequenceRows> pending_;
  std::vector<int> pending_positions_;
  std::vector<std::vector<int>> topology_children_;  // static: TreeTopology::children() of the tree to grow
  int level_ = 0;                   // static: levels grown
  // static: contexts whose children the next level draws, each with its topology context
  std::vector<std::pair<int, int>> frontier_;
  std::priority_queue<Candidate> candidates_;  // dynamic: the frontier
  std::vector<double> node_score_;  // dynamic: per node
  long pushed_ = 0;                 // dynamic: candidates pushed so far
};

}  // namespace specula
