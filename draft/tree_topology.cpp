#include "draft/tree_topology.h"

#include <algorithm>

#include "base/error.h"

namespace specula {

std::vector<int> TreeTopology::depths() const {
  std::vector<int> depth(parent.size());
  for (std::size_t i = 0; i < parent.size(); ++i) {
    SPECULA_CHECK(parent[i] >= -1 && parent[i] < static_cast<int>(i), "tree topology: node ", i, " has parent ",
                  parent[i], " (parents precede their children)");
    depth[i] = parent[i] < 0 ? 1 : depth[static_cast<std::size_t>(parent[i])] + 1;
  }
  return depth;
}

int TreeTopology::depth() const {
  const std::vector<int> depth = depths();
  return depth.empty() ? 0 : *std::max_element(depth.begin(), depth.end());
}

std::vector<std::vector<int>> TreeTopology::children() const {
  std::vector<std::vector<int>> out(parent.size() + 1);
  for (std::size_t i = 0; i < parent.size(); ++i) out[static_cast<std::size_t>(parent[i] + 1)].push_back(static_cast<int>(i));
  return out;
}

bool TreeTopology::is_chain() const {
  for (std::size_t i = 0; i < parent.size(); ++i)
    if (parent[i] != static_cast<int>(i) - 1) return false;
  return true;
}

TreeTopology chain_topology(int gamma) {
  TreeTopology t;
  for (int i = 0; i < gamma; ++i) t.parent.push_back(i - 1);
  return t;
}

TreeTopology branching_topology(std::span<const int> branching) {
  TreeTopology t;
  std::vector<int> level{-1};
  for (int b : branching) {
    std::vector<int> next;
    for (int p : level)
      for (int k = 0; k < b; ++k) {
        next.push_back(t.size());
        t.parent.push_back(p);
      }
    level = std::move(next);
  }
  return t;
}

}  // namespace specula
