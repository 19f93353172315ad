// defines: BeamTree, ReplayedBeam / BeamReplay and replay_beam_trees, the pure half of
// speculative beam search: plain beam search's step rule (sampling/beam_search.h BeamSearch)
// run over the target's verified logits of every live beam's draft tree, one depth (one beam
// step) at a time, for as long as every next beam the rule chose is a drafted node (so the
// logits after it are known). No engine: tests drive it with hand-built trees and logits.
//
// Depth 1 always runs: it needs only each beam's root context (row 0 of its tree's logits).
// After depth d the rule's next beams are (parent, token) pairs; each parent sits at a context
// of its origin's tree, and when the token is a child node of that context the new beam sits
// at the child's context. The replay takes depth d + 1 only if that holds for every next
// beam; otherwise it stops with the beams of depth d (their last token, drafted or not, is
// the next root). The search's state is exactly what plain beam search has after the same
// number of steps, since the rows it read are the same rows (and the logit controls it applies
// read its own beams' tokens, not the trees).
#pragma once

#include <span>
#include <vector>

#include "sampling/beam_search.h"
#include "verify/token_tree.h"

namespace specula {

// The verified draft tree of one live beam (live beam i of the search at the pass's start).
struct BeamTree {
  const TokenTree* tree;
  std::span<const float> logits;  // in [tree->num_contexts(), vocab]: the target's logits per context
};

// A live beam after the replay: it extends live beam `origin` (of the pass's start) by the
// search's last `depths` tokens, of which the first depths - 1 are the nodes `path` of the
// origin's tree (root-down); the last token is the beam's next root.
struct ReplayedBeam {
  int origin;
  std::vector<int> path;
};

struct BeamReplay {
  int depths = 0;                   // beam steps taken (>= 1)
  std::vector<ReplayedBeam> beams;  // the search's live beams in its order; empty once it is done
};

// Replays the step rule over `trees` (one per live beam of `search`, in order) and advances
// `search` by the depths it could take. search: in/out, not done.
BeamReplay replay_beam_trees(BeamSearch& search, std::span<const BeamTree> trees, int vocab);

}  // namespace specula
