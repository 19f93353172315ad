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
#include "engine/forward.h"

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
  // The proposal as a device may draw it whole, or nodes 0 where it may not (see device_shape).
  struct DeviceShape {
    int nodes = 0;             // tokens (a tree's nodes) drawn
    std::vector<int> parents;  // [nodes] a static tree's, -1 the root, in growth order; empty otherwise
    int mode = kDrawTopK;      // the kDraw* code every context's children are drawn by
    DynamicDraft dynamic;      // on where a dynamic tree
    int forwards = 0;          // draft forwards (device rounds) it takes
    int fed = 0;               // nodes [0, fed) are fed to a later round
    int siblings = 0;          // a chain's siblings: the root's children after the first
    // The proposal order of the nodes: proposal node k is node order[k] here ([nodes]).
    std::vector<int> order;
    // Each node's parent as the proposal holds it until its tokens are known ([nodes]): a static
    // tree's parents; a chain of every node for a chain and a dynamic tree.
    std::vector<int> held_parents;

    bool on() const { return nodes > 0; }
    bool is_tree() const { return !parents.empty(); }
    bool sampled() const { return mode != kDrawTopK; }
    // The options its draws take where the drafter's distribution is `device`'s chain: a greedy
    // tree ranks children by the softmax (as the host's draw_siblings ranks q), a chain takes
    // the argmax.
    DrawOptions draw_options(DrawOptions device) const {
      return device.greedy() && (is_tree() || dynamic.on()) ? DrawOptions{1.0f} : device;
    }
    // The device chain drawing it after the catch-up rows `first`, with `uniforms`
    // (device_uniforms) and draw_options(device); it views parents and uniforms.
    DeviceChain chain(const SequenceRows& first, DrawOptions device, std::span<const double> uniforms) const {
      return DeviceChain{first, nodes, draw_options(device), uniforms, parents, mode, dynamic.width, dynamic.top_k};
    }
  };
  // This proposal (before root_ready), within its bound's max_depth, as a device may draw it:
  //   a plain chain (a chain topology or an adaptive chain, no stop_below): its tokens;
  //   that chain with siblings (DraftBound::siblings): a static tree whose root draws the
  //     chain's first token and then its siblings (kWithoutReplacement where sampled, kTopK
  //     where greedy), each chain node one child; in proposal order the chain, then the
  //     siblings (those the bound's max_nodes allows);
  //   a static tree (no stop_below, no siblings): each level after the one above, its nodes in
  //     their parents' order, each context's children in rank order;
  //   a dynamic tree (DraftRounds::dynamic) feeding every node within max_depth, so that no
  //     round depends on depths.
  // Else off (a chain with stop_below).
  DeviceShape device_shape() const;
  // The uniforms of `shape`'s draws from this growth's rng ([shape.nodes] where it is sampled,
  // else empty), in the host's order (proposal order: a chain's tokens, then its siblings'),
  // placed at the shape's nodes. Where the host would skip the draws of children a
  // distribution cannot give, every node takes one here.
  void device_uniforms(const DeviceShape& shape, std::vector<double>& uniforms);
  // `shape` drawn elsewhere: each node's token, in [nodes] (kAbsentDraw: none, nor anything
  // under it), each node's parent (a dynamic tree's, in [nodes], in the order taken; else
  // ignored) and the distributions drawn from (empty unless sampled): a chain's contexts
  // 0 .. nodes - 1, in [nodes, vocab]; a static tree's, each node's parent context's, in
  // [nodes, vocab]. The proposal is then the tree of the nodes there, complete, the nodes the
  // host would have fed fed. Returns each proposal node's node in the shape.
  std::vector<int> device_drawn(const DeviceShape& shape, std::span<const int> tokens, std::span<const int> parents,
                                std::span<const float> q, int vocab);
  // `shape` drawn on a device and left there: node i of the shape is draw node_draws[i] of
  // `draws`. The tree holds a placeholder for every node until verification gives their tokens
  // (a dynamic tree's also their parents: a chain until then; Proposal::draws). Returns each
  // proposal node's node in the shape.
  std::vector<int> device_left(const DeviceShape& shape, std::shared_ptr<const DeviceDraws> draws,
                               std::span<const int> node_draws);
  // After verification: adapts an adaptive chain's length to the accepted count.
  void accepted(int drafted, int accepted);

  int gamma() const { return gamma_; }  // the chain length the next proposal starts from
  int levels() const { return level_; }  // levels of the proposal grown so far

  static constexpr int kMaxAdaptiveGamma = 16;  // adaptive chains grow up to this length

 private:
  // The proposal made the tree of `shape`'s nodes under `parents` with `tokens` less the absent
  // ones, in shape.order, complete; its fed nodes are its longest prefix whose shape nodes lie
  // before shape.fed. Returns each proposal node's node in the shape.
  std::vector<int> complete_tree(const DeviceShape& shape, std::span<const int> parents, std::span<const int> tokens);
  // The siblings a finished chain of `chain` tokens takes within max_nodes_.
  int wanted_siblings(int chain) const;
  // The draw mode of this proposal's children (verify/token_tree.h's SiblingDraw).
  SiblingDraw draw_mode() const;
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
