#include "draft/sequoia_tree.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "base/error.h"

namespace specula {

double rank_acceptance(const RankAcceptance& p, int depth, int rank) {
  const std::vector<double>& row = p[static_cast<std::size_t>(std::min<int>(depth, static_cast<int>(p.size())) - 1)];
  return rank < static_cast<int>(row.size()) ? row[static_cast<std::size_t>(rank)] : 0.0;
}

void validate_rank_acceptance(const RankAcceptance& p, const char* what) {
  SPECULA_CHECK(!p.empty(), what, ": needs at least one depth's row of acceptance probabilities");
  for (std::size_t d = 0; d < p.size(); ++d) {
    SPECULA_CHECK(!p[d].empty(), what, ": depth ", d + 1, "'s row is empty");
    double sum = 0;
    for (double x : p[d]) {
      SPECULA_CHECK(std::isfinite(x) && x >= 0 && x <= 1, what, ": depth ", d + 1, " holds ", x,
                    " (each entry a probability in [0, 1])");
      sum += x;
    }
    SPECULA_CHECK(sum <= 1 + 1e-9, what, ": depth ", d + 1, "'s row sums to ", sum,
                  " (at most one child is accepted: at most 1)");
  }
}

namespace {

// best[d][m]: the largest expected accepted nodes below a node at depth d with m nodes for
// its descendants; rest[d][k][m]: the same over its children of rank >= k only, and size
// [d][k][m] the subtree size of its rank-k child in that optimum (0: no child of rank k).
struct Plan {
  int nodes, max_depth, ranks;
  std::vector<std::vector<double>> best;
  std::vector<std::vector<std::vector<double>>> rest;
  std::vector<std::vector<std::vector<int>>> size;
};

Plan plan_tree(const RankAcceptance& p, int nodes, int max_depth) {
  int ranks = 0;
  for (const auto& row : p) ranks = std::max(ranks, static_cast<int>(row.size()));
  ranks = std::min(ranks, nodes);
  Plan plan{nodes, max_depth, ranks, {}, {}, {}};
  const std::size_t depths = static_cast<std::size_t>(max_depth) + 1, sizes = static_cast<std::size_t>(nodes) + 1;
  plan.best.assign(depths, std::vector<double>(sizes, 0.0));
  plan.rest.assign(depths, std::vector<std::vector<double>>(static_cast<std::size_t>(ranks) + 1, std::vector<double>(sizes, 0.0)));
  plan.size.assign(depths, std::vector<std::vector<int>>(static_cast<std::size_t>(ranks) + 1, std::vector<int>(sizes, 0)));
  for (int d = max_depth - 1; d >= 0; --d) {  // nodes at max_depth have no children: best 0
    for (int k = ranks - 1; k >= 0; --k) {
      const double pk = rank_acceptance(p, d + 1, k);
      for (int m = 1; m <= nodes; ++m) {
        double& value = plan.rest[d][k][m];
        int& chosen = plan.size[d][k][m];
        for (int s = 1; s <= m; ++s) {
          const double v = pk * (1 + plan.best[d + 1][s - 1]) + plan.rest[d][k + 1][m - s];
          if (v > value) {
            value = v;
            chosen = s;
          }
        }
      }
    }
    plan.best[d] = plan.rest[d][0];
  }
  return plan;
}

}  // namespace

TreeTopology sequoia_tree(const RankAcceptance& p, int nodes, int max_depth) {
  validate_rank_acceptance(p, "sequoia tree");
  SPECULA_CHECK(nodes >= 0 && max_depth >= 0, "sequoia tree: needs nodes >= 0 and max_depth >= 0, got ", nodes,
                " and ", max_depth);
  max_depth = std::min(max_depth, nodes);
  const Plan plan = plan_tree(p, nodes, max_depth);
  // Level order: each queued entry is a context (its node, -1 for the root), its depth and
  // the nodes its descendants get.
  struct Context {
    int node, depth, budget;
  };
  TreeTopology tree;
  std::deque<Context> queue{{-1, 0, nodes}};
  while (!queue.empty()) {
    const Context c = queue.front();
    queue.pop_front();
    if (c.depth >= max_depth) continue;
    int budget = c.budget;
    for (int k = 0; k < plan.ranks && budget > 0; ++k) {
      const int s = plan.size[c.depth][k][budget];
      if (s == 0) break;
      tree.parent.push_back(c.node);
      queue.push_back({tree.size() - 1, c.depth + 1, s - 1});
      budget -= s;
    }
  }
  return tree;
}

double expected_accepted(const TreeTopology& tree, const RankAcceptance& p) {
  const std::vector<int> depth = tree.depths();
  std::vector<double> reach(tree.parent.size());
  std::vector<int> next_rank(tree.parent.size() + 1, 0);
  double total = 0;
  for (std::size_t i = 0; i < tree.parent.size(); ++i) {
    const int parent = tree.parent[i];
    const std::size_t up = static_cast<std::size_t>(parent);
    const int rank = next_rank[static_cast<std::size_t>(parent + 1)]++;
    reach[i] = (parent < 0 ? 1.0 : reach[up]) * rank_acceptance(p, depth[i], rank);
    total += reach[i];
  }
  return total;
}

}  // namespace specula
