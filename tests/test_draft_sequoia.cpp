// Tests: tree topologies (chain, branching list), Sequoia's dynamic programme against brute force
// over every ordered tree of small budgets, and the rank counts a verified tree adds to the stats.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "base/rng.h"
#include "draft/sequoia_tree.h"
#include "runtime/speculative_sequence.h"

using namespace specula;

namespace {

// An ordered forest: the children of one context, each with its own children.
struct Forest {
  std::vector<Forest> trees;
};

int nodes_of(const Forest& f) {
  int n = 0;
  for (const Forest& t : f.trees) n += 1 + nodes_of(t);
  return n;
}

// Expected accepted nodes of a forest hanging under a context at depth `depth` (the root: 0),
// evaluated on the nested form, apart from expected_accepted's flat walk.
double forest_value(const Forest& f, const RankAcceptance& p, int depth) {
  double v = 0;
  for (std::size_t k = 0; k < f.trees.size(); ++k)
    v += rank_acceptance(p, depth + 1, static_cast<int>(k)) * (1 + forest_value(f.trees[k], p, depth + 1));
  return v;
}

// Every ordered forest of at most `nodes` nodes and `levels` levels.
std::vector<Forest> all_forests(int nodes, int levels) {
  std::vector<Forest> out{Forest{}};
  if (nodes == 0 || levels == 0) return out;
  // A forest is a first tree (a root and a forest below it) and a forest after it.
  for (int first = 1; first <= nodes; ++first)
    for (const Forest& below : all_forests(first - 1, levels - 1))
      for (const Forest& after : all_forests(nodes - first, levels)) {
        if (nodes_of(below) + 1 != first) continue;  // each size once: the first tree has exactly `first` nodes
        Forest f;
        f.trees.push_back(below);
        f.trees.insert(f.trees.end(), after.trees.begin(), after.trees.end());
        out.push_back(std::move(f));
      }
  return out;
}

// The forest as a topology in level order (the order sequoia_tree writes).
TreeTopology flatten(const Forest& f) {
  TreeTopology t;
  std::vector<std::pair<const Forest*, int>> level{{&f, -1}};
  while (!level.empty()) {
    std::vector<std::pair<const Forest*, int>> next;
    for (const auto& [forest, node] : level)
      for (const Forest& child : forest->trees) {
        t.parent.push_back(node);
        next.emplace_back(&child, t.size() - 1);
      }
    level = std::move(next);
  }
  return t;
}

RankAcceptance random_acceptance(Philox& rng) {
  RankAcceptance p(1 + static_cast<std::size_t>(rng.uniform() * 3));
  for (auto& row : p) {
    row.resize(1 + static_cast<std::size_t>(rng.uniform() * 4));
    double sum = rng.uniform() * 0.5;  // the mass no child takes
    for (double& x : row) sum += (x = rng.uniform() < 0.1 ? 0.0 : rng.uniform());
    for (double& x : row) x /= sum;
  }
  return p;
}

}  // namespace

TEST_CASE("tree topologies: chains and branching lists", "[draft][sequoia]") {
  CHECK(chain_topology(3).parent == std::vector<int>{-1, 0, 1});
  CHECK(chain_topology(3).is_chain());
  CHECK(chain_topology(3).depth() == 3);
  const TreeTopology t = branching_topology(std::vector<int>{3, 2});
  CHECK(t.parent == std::vector<int>{-1, -1, -1, 0, 0, 1, 1, 2, 2});
  CHECK(!t.is_chain());
  CHECK(t.depth() == 2);
  CHECK(t.children()[0] == std::vector<int>{0, 1, 2});
  CHECK(t.children()[2] == std::vector<int>{5, 6});
  CHECK(branching_topology(std::vector<int>{1, 1, 1}).parent == chain_topology(3).parent);
}

TEST_CASE("sequoia trees are optimal for their acceptance vector: brute force over every ordered tree",
          "[draft][sequoia]") {
  Philox rng(7);
  int beats_chain_and_star = 0, tables = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const RankAcceptance p = random_acceptance(rng);
    for (int nodes = 1; nodes <= 6; ++nodes)
      for (int levels = 1; levels <= nodes; levels += 2) {
        INFO("trial " << trial << ", " << nodes << " nodes, " << levels << " levels");
        double best = 0;
        for (const Forest& f : all_forests(nodes, levels)) {
          const double v = forest_value(f, p, 0);
          REQUIRE(std::fabs(expected_accepted(flatten(f), p) - v) < 1e-12);
          best = std::max(best, v);
        }
        const TreeTopology tree = sequoia_tree(p, nodes, levels);
        CHECK(tree.size() <= nodes);
        CHECK(tree.depth() <= levels);
        for (std::size_t i = 1; i < tree.parent.size(); ++i) CHECK(tree.parent[i] >= tree.parent[i - 1]);  // level order
        CHECK(std::fabs(expected_accepted(tree, p) - best) < 1e-12);
        ++tables;
        const double chain = expected_accepted(chain_topology(std::min(nodes, levels)), p);
        const double star = expected_accepted(branching_topology(std::vector<int>{nodes}), p);
        if (best > std::max(chain, star) + 1e-6) ++beats_chain_and_star;
      }
  }
  // The comparison is not between trivial shapes: most optima are neither a chain nor a star.
  CHECK(beats_chain_and_star > tables / 4);
}

TEST_CASE("sequoia trees follow the acceptance vector's shape", "[draft][sequoia]") {
  // Only rank 0 is ever accepted: a chain. Only depth 1 matters: a star of the ranks that pay.
  CHECK(sequoia_tree({{0.9}}, 5, 5).parent == chain_topology(5).parent);
  CHECK(sequoia_tree({{0.5, 0.3, 0.1}, {0.0}}, 8, 8).parent == std::vector<int>{-1, -1, -1});
  CHECK(sequoia_tree({{0.5}}, 0, 4).size() == 0);
  CHECK_THROWS(sequoia_tree({{0.7, 0.4}}, 4, 4));  // a row summing above 1
  CHECK_THROWS(sequoia_tree({{-0.1}}, 4, 4));
  CHECK_THROWS(sequoia_tree({}, 4, 4));
}

TEST_CASE("rank counts: a verified tree's children tried along its accepted path", "[draft][sequoia]") {
  // Root children 0, 1, 2; node 1's children 3, 4; node 4's child 5.
  TokenTree tree(SiblingDraw::kTopK);
  for (int parent : {-1, -1, -1, 1, 1, 4}) tree.add_node(parent, 10 + tree.size());
  SpeculativeStats stats;
  stats.count_ranks(tree, std::vector<int>{1, 4});   // rank 1, then rank 1, then node 5 rejected
  stats.count_ranks(tree, std::vector<int>{});       // all three root children rejected
  stats.count_ranks(tree, std::vector<int>{1, 4, 5});  // down to the leaf
  CHECK(stats.rank_tried == std::vector<std::vector<long>>{{3, 3, 1}, {2, 2}, {2}});
  CHECK(stats.rank_accepted == std::vector<std::vector<long>>{{0, 2, 0}, {0, 2}, {1}});
}
