// defines: TreeShape (a static topology, or a dynamic tree's budget) and TreeGrowth, how a
// proposer with a next-token distribution q per context grows its tree: a static tree of any
// topology level by level (each frontier context draws as many children as its topology node
// has), or a dynamic tree best-first by cumulative log q under a node budget (EAGLE-2's
// expansion: the top-k children of the best nodes, `dynamic_width` nodes a round), and a
// finished chain's siblings. It asks its drafter to feed ranges of nodes (one draft forward
// each) and reads the q rows the drafter appends for them; the drafter owns the model, its
// cache and the q transform. The shape is chosen by draft.gamma (a chain), draft.tree (a
// static branching list), draft.sequoia (a Sequoia tree for draft.budget nodes) or
// draft.budget alone (dynamic); tree_shape() (runtime/scheduler_limits.h) makes it.
//
// Usage (a drafter with a model; draft/model_drafter.cpp):
//   TreeGrowth growth(sampled, tree_shape(options));
//   growth.begin(bound, rng);
//   growth.proposal().q = q_of(model(committed));           // the root's row, [vocab]
//   growth.root_ready(vocab);
//   while (const std::optional<NodeFeed> feed = growth.pending()) {
//     const TokenTree& tree = growth.proposal().tree;        // nodes [feed->first, feed->last)
//     for (const float* row : model(tree, *feed)) append(growth.proposal().q, q_of(row));
//     growth.fed(*feed, vocab);
//   }
//   Proposal proposal = growth.take(vocab);                  // tree + q rows, to verify
//   growth.accepted(proposal.tree.size(), accepted);         // after verification
#pragma once

#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "draft/drafter.h"
#include "draft/tree_topology.h"
#include "engine/device_draft.h"

namespace specula {

struct TreeShape {
  TreeTopology topology;       // static tree; empty when dynamic
  int dynamic_budget = 0;      // > 0: dynamic tree of this many nodes
  int dynamic_top_k = 4;       // dynamic: children considered per expanded node
  int dynamic_width = 4;       // dynamic: nodes added (and fed to the draft) per round
  bool adaptive = false;       // chains only: grow gamma on full acceptance, shrink on early rejection
};

// A range of nodes [first, last) a drafter feeds to its model, whose q rows (contexts
// first + 1 .. last) it appends to proposal().q in node order.
struct NodeFeed {
  int first = 0, last = 0;
};

class TreeGrowth {
 public:
  // `stochastic`: children are sampled (chains i.i.d., static trees without replacement) and
  // q is kept; otherwise they are the top-k of q.
  TreeGrowth(bool stochastic, TreeShape shape);

  // A new proposal within `bound`, drawing with `rng` (used until take()).
  void begin(DraftBound bound, Philox& rng);
  // The proposal in progress: its tree and q rows ([contexts so far, vocab]).
  Proposal& proposal() { return proposal_; }
  // After the root's q row is in proposal().q: grows until it needs a feed or is complete.
  void root_ready(int vocab);
  // After the q rows of `feed` are appended: grows until it needs a feed or is complete.
  void fed(NodeFeed feed, int vocab);
  // The feed the proposal needs next; nullopt once it is complete.
  const std::optional<NodeFeed>& pending() const { return pending_; }
  // Nodes fed so far (a prefix of node order).
  int fed_nodes() const { return fed_nodes_; }
  // The finished proposal (q padded with zero rows for unfed leaves, or cleared when no
  // context's children were sampled).
  Proposal take(int vocab);
  // The tokens of this proposal when it is a plain chain (a static chain topology, within its
  // bound's max_depth, no stop_below, no siblings): what a device may draw whole; else 0.
  int plain_chain_length() const;
  // That chain drawn elsewhere, with this growth's rng in its order (one uniform a token, where
  // sampled): its tokens, in [length], and the q rows of contexts 0 .. length - 1, in
  // [length, vocab] (empty when greedy). The proposal is then complete, every node but the
  // last fed.
  void chain_drawn(std::span<const int> tokens, std::span<const float> q);
  // The parents of this proposal's whole static tree in growth order (each level after the
  // one above, its nodes in their parents' order, each context's children in rank order),
  // within its bound's max_depth, when it is a tree a device may draw whole (a static
  // topology that is not a chain, no stop_below, no siblings); else empty.
  std::vector<int> device_tree_parents() const;
  // This proposal's dynamic tree as a device may grow it whole (DraftRounds::dynamic: every
  // node it feeds within its bound's max_depth, so that no round depends on depths); else
  // off.
  DynamicDraft device_dynamic() const;
  // That tree grown elsewhere: each node's token, in [budget] (kAbsentDraw: none), and parent
  // (-1: the root), in [budget], nodes in the order taken. The proposal is then the tree of the
  // nodes there, those of the batches before the last fed. Returns the grown node of each
  // proposal node.
  std::vector<int> dynamic_drawn(std::span<const int> parents, std::span<const int> tokens);
  // The draw mode of this proposal's children (verify/token_tree.h's SiblingDraw).
  SiblingDraw draw_mode() const;
  // That tree drawn elsewhere (one uniform a node, where sampled): each node's token, in
  // [nodes] (kAbsentDraw: not there, nor anything under it), and the distribution it was drawn
  // from, in [nodes, vocab] (empty unless sampled). The proposal is then the tree of the nodes
  // there, every node above the deepest level fed. Returns the drawn node of each proposal node.
  std::vector<int> tree_drawn(std::span<const int> parents, std::span<const int> tokens, std::span<const float> q,
                              int vocab);
  // That tree drawn on a device and left there: node i's token is draw node_draws[i] of
  // `draws` (the tree holds placeholders for every node until verification gives them, absent
  // ones kAbsentDraw: Proposal::draws).
  void tree_left_on_device(std::span<const int> parents, std::shared_ptr<const DeviceDraws> draws,
                           std::span<const int> node_draws);
  // This proposal's dynamic tree (device_dynamic()) grown on a device and left there: node i is
  // draw node_draws[i] of `draws`. The tree holds a chain of every node, with placeholders,
  // until verification gives its tokens and parents (Proposal::draws); the nodes of the
  // batches before the last are fed.
  void dynamic_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws);
  // That chain drawn on a device and left there: node i's token is draw node_draws[i] of
  // `draws` (the tree holds placeholders until verification gives them, Proposal::draws).
  void chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws);
  // After verification: adapts an adaptive chain's length to the accepted count.
  void accepted(int drafted, int accepted);

  int gamma() const { return gamma_; }  // the chain length the next proposal starts from
  int levels() const { return level_; }  // levels of the proposal grown so far

  static constexpr int kMaxAdaptiveGamma = 16;  // adaptive chains grow up to this length

 private:
  // The proposal made the chain of `tokens`, complete, every node but the last fed.
  void complete_chain(std::span<const int> tokens);
  // The proposal made the tree of `parents` (parents before children) and `tokens` less its
  // absent nodes, complete, the nodes before `fed_rows` fed; returns each proposal node's
  // index there.
  std::vector<int> complete_tree(std::span<const int> parents, std::span<const int> tokens, int fed_rows);
  struct Candidate {
    double score;  // cumulative log draft probability of the path
    long order;    // push order: ties go to the earlier (more probable sibling first)
    int parent;
    int token;
    bool operator<(const Candidate& o) const { return score < o.score || (score == o.score && order > o.order); }
  };

  void advance_static(int vocab);
  void advance_dynamic();
  // Appends up to siblings_ other candidates for a finished chain's first token, within
  // max_nodes_ nodes in all (0: no bound).
  void add_siblings(int vocab);
  void push_children(int context, double base, int vocab);

  bool stochastic_;
  TreeShape shape_;
  int gamma_;
  std::vector<std::vector<int>> topology_children_;  // static: TreeTopology::children() of the tree to grow

  Philox* rng_ = nullptr;
  int max_depth_ = 0;
  double stop_below_ = 0;    // DraftBound::stop_below
  int siblings_ = 0;         // DraftBound::siblings
  int max_nodes_ = 0;        // DraftBound::max_nodes
  double confidence_ = 1;    // a chain's product of its tokens' draft probabilities so far
  int fed_nodes_ = 0;
  Proposal proposal_;
  std::optional<NodeFeed> pending_;
  int level_ = 0;                                   // static: levels grown
  std::vector<std::pair<int, int>> frontier_;       // static: (context, topology context) drawing next
  std::priority_queue<Candidate> candidates_;       // dynamic: the frontier
  std::vector<double> node_score_;                  // dynamic: per node
  long pushed_ = 0;                                 // dynamic: candidates pushed so far
};

}  // namespace specula
