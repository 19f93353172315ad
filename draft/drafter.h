// defines: Proposal and Drafter, the interface every proposer implements: propose a token
// tree after the committed tokens, then learn which of its nodes were accepted.
#pragma once

#include <span>
#include <vector>

#include "sampling/rng.h"
#include "verify/token_tree.h"

namespace specula {

struct Proposal {
  TokenTree tree;
  // Draft distribution at each context, [tree.num_contexts(), vocab] row-major; empty when
  // the tree has no context whose children were sampled (greedy or point-mass proposals).
  std::vector<float> q;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // committed: in, every token of the sequence so far; the last one (the root) is not yet
  // in the target's cache. The tree is at most max_depth deep.
  virtual Proposal propose(std::span<const int> committed, int max_depth, Philox& rng) = 0;

  // After verification: the nodes of the last proposal that were accepted (root-down).
  // `committed` now also holds the accepted tokens and the bonus token.
  virtual void accept(const TokenTree& tree, std::span<const int> accepted_nodes,
                      std::span<const int> committed) = 0;
};

}  // namespace specula
