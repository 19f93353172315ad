// defines: the flat form of a batch of draft trees that the tree-verification kernels
// (verify_tree.cu) read, CUDA-free: where each sequence's nodes, contexts and uniforms start.
// engine/ does not see verify/'s TokenTree; callers flatten it (tokens, parents, one draw code
// per context: engine/device_verify.h's kDraw* codes).
//
// Sequence s of a batch owns nodes [node_indptr[s], node_indptr[s + 1]) (n_s of them, parents
// local to the sequence: -1 = the root, else a smaller local index), contexts
// [context_offset(s), + n_s + 1) and uniforms [uniform_offset(s), + 2 n_s + 1) in
// verify/verifier.h's layout.
#pragma once

#include "engine/device_verify.h"

namespace specula::cuda {

// The first context / uniform of sequence s, whose first node is node_indptr[s].
inline constexpr int context_offset(int s, int first_node) { return first_node + s; }
inline constexpr int uniform_offset(int s, int first_node) { return 2 * first_node + s; }

}  // namespace specula::cuda
