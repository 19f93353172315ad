// defines: SiblingDraw (how the children of one context were proposed) and TokenTree, the
// flat draft tree every drafter produces and every verifier consumes.
//
// Nodes are drafted tokens in topological order (parent index < node index). Contexts
// are the points a next-token distribution is taken at: context 0 is the root (after the
// last committed token, which is not a node), context 1 + i is "after node i". The
// children of context c are the nodes whose parent is c - 1, in increasing node order;
// that order is the order a stochastic verifier tries them in. Distributions p (target)
// and q (draft) are rows indexed by context: [num_contexts(), vocab].
#pragma once

#include <span>
#include <vector>

namespace specula {

enum class SiblingDraw {
  kSampled,             // children drawn i.i.d. from q, in node order (duplicates possible)
  kWithoutReplacement,  // drawn in node order from q with the earlier siblings removed
  kTopK,                // deterministic distinct proposals (e.g. the k most probable under q)
};

struct TokenTree {
  std::vector<int> tokens;        // [n] drafted token of each node
  std::vector<int> parent;        // [n] parent node, -1 = child of the root
  std::vector<int> depth;         // [n] 1 for children of the root
  std::vector<SiblingDraw> draw;  // [n + 1] per context: how its children were drawn

  // An empty tree (root only) whose root children are drawn with `root_draw`.
  explicit TokenTree(SiblingDraw root_draw = SiblingDraw::kSampled) : draw{root_draw} {}

  // A chain: node i is the only child of node i - 1; every context uses `mode`.
  static TokenTree chain(std::span<const int> chain_tokens, SiblingDraw mode);

  int size() const { return static_cast<int>(tokens.size()); }
  int num_contexts() const { return size() + 1; }

  // Appends a child of `parent_node` (-1 = root) and returns its index. The new node's
  // own context inherits the draw mode of its parent's context (assign draw[] to change).
  int add_node(int parent_node, int token);

  // The children of `context` in node order; first_child / next_sibling walk the same
  // list without allocating (-1 = none). Each is a scan of the later nodes.
  std::vector<int> children(int context) const;
  int first_child(int context) const;
  int next_sibling(int node) const;
  // The tokens of the path that ends at `context` (root first): empty for the root, else the
  // tokens of node context - 1 and its ancestors, in depth order. Written into `out`.
  void path_tokens(int context, std::vector<int>& out) const;

  // Throws SpeculaError unless the arrays have consistent sizes, parents precede their
  // children, depth = parent depth + 1, tokens lie in [0, vocab) and the children of
  // every kWithoutReplacement / kTopK context are distinct tokens. O(n log n): for
  // drafters and tests; the verifiers check only what they index (sizes, token range).
  void validate(int vocab) const;
};

}  // namespace specula
