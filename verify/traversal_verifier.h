// defines: verify_traversal, traversal verification of a token tree (Weng, Hu, Chen, Liu, Mei,
// Qiu, Tian, Shi, "Traversal Verification for Speculative Tree Decoding", NeurIPS 2025), and
// traverse_tree, the same traversal with its node tests left to the caller.
//
// Rule. Every context X (the root, or after node X) carries a scalar a(X) and a measure m_X
// over the next token with sum m_X = a(X): a(root) = 1, m_root = p_root, and when X is first
// reached as child x of context Y, whose children are drawn from q_j (the law of x given its
// earlier siblings, as verifier.h: q for kSampled, q without the earlier siblings renormalised
// for kWithoutReplacement, delta(x) for kTopK):
//   a(X) = min(1, m_Y(x) / q_j(x))   (0 where m_Y(x) = 0; 1 where q_j(x) = 0),  m_X = a(X) p_X.
// The tree is walked depth first, children in node order, and a context is tested once all
// its children are gone (post-order): node X is accepted when its uniform eta_X < a(X). An
// acceptance ends the step: the path root..X is kept and one token is drawn from norm(m_X).
// A rejection deletes X and updates its parent Y with the q_j that X was drawn from:
//   R = 1 - sum_v min(m_Y(v), q_j(v)) = sum_v max(m_Y(v) - q_j(v), 0) + 1 - a(Y),
//   m_Y <- max(m_Y - q_j, 0) / R,  a(Y) <- sum m_Y   (a(Y) = 0 where R = 0),
// and the walk goes on with Y's next child, whose a() is computed from the updated m_Y. The
// root is never tested (its a() stays 1): when all its children are gone, the token is drawn
// from norm(m_root).
// Why it is exact: by induction from the leaves, the walk below a context Y that starts with
// (a(Y), m_Y) emits "y, then the target's continuation" with measure m_Y(y) and deletes Y with
// probability 1 - a(Y). A leaf does so directly. For Y's first child x ~ q_j, the child's walk
// (by induction) ends below Y with the measure a(X) p_X, so Y's walk emits x with q_j(x) a(X) =
// min(q_j(x), m_Y(x)), followed by p_X's continuation, and goes on with probability R; what is
// left to emit is max(m_Y - q_j, 0) and to delete 1 - a(Y), which after dividing by R is the
// updated (a(Y), m_Y). That update does not depend on which x was deleted: a deleted x has
// m_Y(x) <= q_j(x), so its updated weight is 0, and the next sibling may be drawn from any
// q_{j+1} that excludes it. At the root a(Y) = 1 and the emission is p_root. The modes need
// what verifier.h states for token-level verification: kSampled children drawn from q
// independently of their earlier siblings, kWithoutReplacement from q without them, kTopK any
// distinct proposals chosen without the verification uniforms; subtrees drawn given their own
// path. Every SiblingDraw mode is supported.
// Where a(Y) = 1 (the root, or a path whose ratios all reached 1) it stays 1 and the update is
// token-level's residual norm(max(r - q_j, 0)). On a chain a(X) is block verification's keep_i
// and the updated a(Y) its stop_i = rho_i / (rho_i + 1 - keep_i) (block_verifier.h): testing
// leaf first takes the largest i with eta_i < stop_i, so on a chain verify_traversal gives
// verify_block's result, draw for draw.
// Uniforms: verify_stochastic's layout; node i's test reads uniforms[i], the final draw after
// context c reads uniforms[n + c].
#pragma once

#include <functional>
#include <span>

#include "verify/residual.h"
#include "verify/token_tree.h"
#include "verify/verifier.h"

namespace specula {

// Where a traversal ends: the accepted node (-1: none, the draw is the root's) and the
// distribution the final token is drawn from (m of that context, unnormalised; the context's
// p row while it has lost no child).
struct TraversalEnd {
  int accepted = -1;
  Residual final_draw;
};

// Decides the test of `node` whose current a() is `alpha`: true accepts it.
using TraversalTest = std::function<bool(int node, double alpha)>;

// The traversal above with each test decided by `test`, called once per tested node in the
// order of the walk; a node reached with a() = 0 is deleted with its subtree untested (every
// a() below it is 0). p, q, vocab: as verify_stochastic (q read at contexts whose children are
// drawn kSampled or kWithoutReplacement; it may be empty when there is none). p must outlive
// the result.
TraversalEnd traverse_tree(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                           const TraversalTest& test);

// Traversal verification of `tree` with the uniforms of verify_stochastic's layout: accepted
// nodes root-down, then the drawn token.
VerifyResult verify_traversal(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                              std::span<const double> uniforms);

}  // namespace specula
