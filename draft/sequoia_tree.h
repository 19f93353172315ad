// defines: RankAcceptance and sequoia_tree, the static draft tree of a node budget that
// maximises the expected number of accepted tokens under a measured acceptance vector
// (Sequoia, Chen et al., 2024: dynamic programming over subtree sizes); expected_accepted,
// that expectation for any topology.
//
// The model (Sequoia's positional acceptance): once a node is accepted, its child of sibling
// rank k is the one accepted next with probability p[d][k], d the child's depth - 1, whatever
// else the tree holds; at most one child is accepted, so each row sums to at most 1. A node
// is accepted with the product of p over its path, and the expected accepted tokens of a tree
// are the sum of that product over its nodes. The rows come from a measured run
// (SpeculativeStats' rank counts, "acceptance_by_rank" in a run's stats); depths below the
// last row take the last row, ranks past a row's end have p = 0.
//
// Usage:
//   RankAcceptance p{{0.6, 0.15, 0.05}, {0.5, 0.1}};  // depth 1, depth 2 and deeper
//   TreeTopology tree = sequoia_tree(p, 16, 8);     // at most 16 nodes, 8 deep
//   double tau = 1 + expected_accepted(tree, p);    // + the bonus token
//   TreeShape shape;                                // draft/model_drafter.h
//   shape.topology = tree;
#pragma once

#include <vector>

#include "draft/tree_topology.h"

namespace specula {

using RankAcceptance = std::vector<std::vector<double>>;  // [depth - 1][sibling rank]

// p[d][k], with the conventions above.
double rank_acceptance(const RankAcceptance& p, int depth, int rank);

// Throws SpeculaError naming `what` unless p has a row, every entry lies in [0, 1] and every
// row sums to at most 1 (+1e-9).
void validate_rank_acceptance(const RankAcceptance& p, const char* what);

// The topology of at most `nodes` nodes and `max_depth` levels with the largest
// expected_accepted under p (ties: the smaller subtree under the lower rank).
// Nodes in level order, each level's nodes by parent, siblings by rank.
TreeTopology sequoia_tree(const RankAcceptance& p, int nodes, int max_depth);

double expected_accepted(const TreeTopology& tree, const RankAcceptance& p);

}  // namespace specula
