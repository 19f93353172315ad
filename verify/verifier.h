// defines: VerifyResult and the tree verifiers: verify_greedy (longest path agreeing with
// the target's argmax) and verify_stochastic (lossless rejection sampling over chains and
// trees, one rule per SiblingDraw mode), plus the fixed layout of their random numbers.
//
// Both are pure functions of their arguments. The output is the accepted path followed by
// one bonus (after a leaf) or corrected (after a rejection) token, so it always holds
// accepted_nodes.size() + 1 tokens.
//
// Stochastic rule at a context with target row p and draft row q (Leviathan et al. and
// Chen et al. 2023 for one child; SpecInfer's multi-step speculative sampling for i.i.d.
// children; Jeon et al. 2024, recursive rejection sampling, without replacement). Keep a
// residual r = p and a proposal q_1 = q. For the children x_1..x_k in node order:
//   accept x_j with probability min(1, r(x_j) / q_j(x_j)): emit it and descend into its
//   context (its siblings and their subtrees no longer matter); otherwise
//   r <- norm(max(r - q_j, 0)) and
//     kSampled:            q_{j+1} = q                           (x_j ~ q, i.i.d.)
//     kWithoutReplacement: q_{j+1} = q_j without x_j, renormalised (x_j ~ q_j)
//     kTopK:               q_j = delta(x_j): accept with r(x_j); a rejection removes x_j
//                          from r (renormalised); q is never read
// When every child is rejected (or the context has none), emit a draw from r.
// Why it is exact: if, given the earlier siblings, x_j ~ q_j, then step j emits y with
// probability min(q_j(y), r(y)) and rejects with probability sum max(r - q_j, 0), after
// which (by induction from the last step, a plain draw from r) the rest emits
// norm(max(r - q_j, 0)); in total min(q_j, r) + max(r - q_j, 0) = r. The accepted child's
// subtree was drafted given x_j alone, so the argument repeats one level down. Hence:
// kSampled needs each child drawn from q independently of its earlier siblings (how many
// children there are may depend on the earlier ones); kTopK holds for any list of distinct
// proposals chosen without the verification uniforms (top-k, n-gram, dynamic trees).
// An i.i.d. duplicate of a rejected token has residual 0 and is rejected.
#pragma once

#include <span>
#include <vector>

#include "base/rng.h"
#include "verify/token_tree.h"

namespace specula {

struct VerifyResult {
  std::vector<int> accepted_nodes;  // node indices along the accepted path, root-down
  std::vector<int> tokens;          // the accepted tokens, then one bonus/corrected token
};

// Greedy: the deepest node whose path from the root agrees with the target's argmax at
// every context (ties: the lowest node index), then the argmax after it.
// target_argmax: in [n + 1], the argmax of p at each context.
VerifyResult verify_greedy(const TokenTree& tree, std::span<const int> target_argmax);

// Uniform layout, verify_uniform_count(tree) = 2n + 1 numbers in [0, 1):
//   uniforms[i],     i in [0, n):  the acceptance test of node i;
//   uniforms[n + c], c in [0, n]:  the draw from the residual (or the bonus) at context c.
// Only those along the visited path are read; a kernel can index them without knowing it.
int verify_uniform_count(const TokenTree& tree);
// The next verify_uniform_count(tree) uniforms of `rng`, in layout order.
std::vector<double> draw_verify_uniforms(const TokenTree& tree, Philox& rng);

// p: in [n + 1, vocab] target distribution at each context (the sampler's transform).
// q: in [n + 1, vocab] draft distribution at each context; rows are read only at contexts
//    with children drawn kSampled or kWithoutReplacement; q may be empty when there is none.
// uniforms: in [verify_uniform_count(tree)], the layout above.
// Rows are probability distributions; a token with p = 0 is never emitted.
VerifyResult verify_stochastic(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                               std::span<const double> uniforms);

}  // namespace specula
