// defines: the flat form of a batch of draft trees that the tree-verification kernels
// (verify_tree.cu) read, CUDA-free: the draw codes of a context and where each sequence's
// nodes, contexts and uniforms start. engine/ does not see verify/'s TokenTree; callers
// flatten it (tokens, parents, one draw code per context).
//
// Sequence s of a batch owns nodes [node_indptr[s], node_indptr[s + 1]) (n_s of them, parents
// local to the sequence: -1 = the root, else a smaller local index), contexts
// [context_offset(s), + n_s + 1) and uniforms [uniform_offset(s), + 2 n_s + 1) in
// verify/verifier.h's layout.
#pragma once

namespace specula::cuda {

// How the children of a context were drawn: the values of verify/token_tree.h's SiblingDraw.
inline constexpr int kDrawSampled = 0;             // i.i.d. from q
inline constexpr int kDrawWithoutReplacement = 1;  // from q without the earlier siblings
inline constexpr int kDrawTopK = 2;                // deterministic distinct proposals

// The first context / uniform of sequence s, whose first node is node_indptr[s].
inline constexpr int context_offset(int s, int first_node) { return first_node + s; }
inline constexpr int uniform_offset(int s, int first_node) { return 2 * first_node + s; }

}  // namespace specula::cuda
