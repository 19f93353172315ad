// defines: the flat form of a batch of draft trees that the tree-verification kernels
// (verify_tree.cu) read, CUDA-free: where each sequence's nodes, contexts and uniforms start.
// engine/ does not see verify/'s TokenTree; callers flatten it (tokens, parents, one draw code
// per context: engine/device_verify.h's kDraw* codes).
//
// Sequence s of a batch owns nodes [node_indptr[s], node_indptr[s + 1]) (n_s of them, parents
// local to the sequence: -1 = the root, else a smaller local index), contexts
// [context_offset(s), + n_s + 1) and uniforms [uniform_offset(s), + 2 n_s + 1) in
// verify/verifier.h's layout. A stochastic sequence's scratch (scratch_doubles) is levels of
// 2 vocab + kScratchSlot doubles: one for the token and block rules, one per context on its
// deepest path for traversal (its walk's stack), each a residual [vocab], a proposal [vocab]
// and kScratchSlot doubles of walk state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "engine/device_verify.h"

namespace specula::cuda {

// The first context / uniform of sequence s, whose first node is node_indptr[s].
inline constexpr int context_offset(int s, int first_node) { return first_node + s; }
inline constexpr int uniform_offset(int s, int first_node) { return 2 * first_node + s; }

inline constexpr int kScratchSlot = 8;

// The scratch of a sequence of `parents` (local, -1 = the root) verified by `rule`, in doubles.
inline std::size_t scratch_doubles(std::span<const int> parents, int rule, int vocab) {
  int levels = 1;
  if (rule == kRuleTraversal) {
    std::vector<int> depth(parents.size());
    for (std::size_t i = 0; i < parents.size(); ++i) {
      depth[i] = parents[i] < 0 ? 1 : depth[static_cast<std::size_t>(parents[i])] + 1;
      levels = std::max(levels, depth[i] + 1);
    }
  }
  return static_cast<std::size_t>(levels) * (2 * static_cast<std::size_t>(vocab) + kScratchSlot);
}

}  // namespace specula::cuda
