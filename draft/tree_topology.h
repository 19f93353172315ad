// defines: TreeTopology, the shape of a static draft tree (which node hangs under which, and
// at what sibling rank) before any token is drawn into it; chain_topology and
// branching_topology, the two shapes the options spell directly (a chain of gamma nodes; a
// branching list 3,2,1,1: three children of the root, two under each, ...).
#pragma once

#include <span>
#include <vector>

namespace specula {

// parent[i]: the parent of node i (-1: a child of the root); parents precede their
// children. The children of a node, in node order, are its sibling ranks 0, 1, ...: the
// drafter draws them in that order (the k most probable, or k draws without replacement).
struct TreeTopology {
  std::vector<int> parent;

  int size() const { return static_cast<int>(parent.size()); }
  // [size()] the depth of each node (1: a child of the root); throws SpeculaError when a
  // parent does not precede its child.
  std::vector<int> depths() const;
  // Depth of the deepest node (0 for an empty topology).
  int depth() const;
  // [size() + 1] children of each context (0: the root, 1 + i: node i), in node order.
  std::vector<std::vector<int>> children() const;
  // Every node has at most one child.
  bool is_chain() const;
};

TreeTopology chain_topology(int gamma);
// Level d has branching[d] children under every node of level d - 1, in level order.
TreeTopology branching_topology(std::span<const int> branching);

}  // namespace specula
