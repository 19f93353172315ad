#include "runtime/beam_replay.h"

#include <cassert>

namespace specula {
namespace {

// The child node of `context` in `tree` holding `token`, or -1 when none was drafted.
int drafted_child(const TokenTree& tree, int context, int token) {
  for (int node = tree.first_child(context); node >= 0; node = tree.next_sibling(node))
    if (tree.tokens[static_cast<std::size_t>(node)] == token) return node;
  return -1;
}

}  // namespace

BeamReplay replay_beam_trees(BeamSearch& search, std::span<const BeamTree> trees, int vocab) {
  assert(!search.done() && static_cast<int>(trees.size()) == search.num_beams());
  const std::size_t v = static_cast<std::size_t>(vocab);
  // Per live beam: where it sits (its origin and its context in the origin's tree) and the
  // nodes it followed there.
  struct Position {
    int origin;
    int context;
    std::vector<int> path;
  };
  std::vector<Position> live;
  for (int b = 0; b < static_cast<int>(trees.size()); ++b) live.push_back({b, 0, {}});
  std::vector<std::span<const float>> rows;
  std::vector<Position> next;
  BeamReplay replay;
  for (;;) {
    rows.clear();
    for (const Position& p : live)
      rows.push_back(trees[static_cast<std::size_t>(p.origin)].logits.subspan(static_cast<std::size_t>(p.context) * v, v));
    const std::vector<BeamChoice>& chosen = search.step(rows);
    ++replay.depths;
    if (search.done()) return replay;
    // The next beams, and whether each one's context was drafted.
    next.clear();
    bool all_drafted = true;
    for (const BeamChoice& c : chosen) {
      const Position& parent = live[static_cast<std::size_t>(c.parent)];
      const int node = drafted_child(*trees[static_cast<std::size_t>(parent.origin)].tree, parent.context, c.token);
      all_drafted = all_drafted && node >= 0;
      next.push_back({parent.origin, node + 1, parent.path});
      if (node >= 0) next.back().path.push_back(node);
    }
    if (!all_drafted) {
      // Stop at depth d: every beam keeps the path to its parent (depth d - 1 nodes); its
      // last token is the next root.
      for (std::size_t i = 0; i < chosen.size(); ++i)
        replay.beams.push_back({live[static_cast<std::size_t>(chosen[i].parent)].origin,
                                live[static_cast<std::size_t>(chosen[i].parent)].path});
      return replay;
    }
    live.swap(next);
  }
}

}  // namespace specula
