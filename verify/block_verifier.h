// defines: verify_block, block verification of a chain (Sun, Mendlovic, Leviathan, Aharoni,
// Beirami, Ro, Suresh, "Block Verification Accelerates Speculative Decoding", ICLR 2025), and
// BlockWeights, the per-depth quantities it decides with.
//
// Rule, for a chain x_1..x_g drafted at contexts 0..g-1 (context i is after x_1..x_i), with
// target rows p_i and draft rows q_i (q_i = delta(x_{i+1}) where the context's draw mode is
// kTopK: a deterministic proposal is a point-mass draft):
//   keep_0 = 1,  keep_i = min(1, keep_{i-1} * p_{i-1}(x_i) / q_{i-1}(x_i))
//   rho_i  = sum_x max(keep_i * p_i(x) - q_i(x), 0)                        (i < g)
//   stop_i = rho_i / (rho_i + 1 - keep_i)  (0 where that is 0 / 0),  stop_g = keep_g
// The chain is kept up to tau = the largest i in 1..g with eta_i < stop_i (0 if none), then
// one token is drawn: from p_g when tau = g, else from norm(max(keep_tau * p_tau - q_tau, 0)).
// Why it is exact: keep_i is the largest probability with which a rule may keep the block
// x_1..x_i given the draft so far; the stop weights make tau's law such that, summed over the
// drafts, the kept prefix followed by the residual draw reproduces p (Sun et al., Theorem 1).
// Token-level verification tests each token on its own ratio and stops at the first
// rejection; block verification lets a later token's high ratio rescue an earlier low one,
// so its expected kept length over the drafts is at least token-level's (their Theorem 2),
// though not on every draft and uniforms.
// Uniforms: verify_stochastic's layout; eta_i = uniforms[i - 1] (node i - 1's test), the
// final draw uses uniforms[g + tau] (context tau's draw).
#pragma once

#include <span>
#include <vector>

#include "verify/residual.h"
#include "verify/token_tree.h"
#include "verify/verifier.h"

namespace specula {

struct BlockWeights {
  std::vector<double> keep;  // [g + 1] keep_i above
  std::vector<double> stop;  // [g + 1] stop_i above; stop[0] = 1 (tau = 0 when no later i stops)
};

// tree: a chain (node i's parent is i - 1). p, q, vocab: as verify_stochastic (q read at
// contexts drawn kSampled or kWithoutReplacement).
BlockWeights block_weights(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab);

// The distribution the final token is drawn from after keeping `tau` tokens: p_g's row when
// tau = g, else max(keep_tau * p_tau - q_tau, 0) (unnormalised).
Residual block_residual(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab,
                        const BlockWeights& weights, int tau);

// Block verification of `chain`: accepted nodes 0..tau-1, then the drawn token.
VerifyResult verify_block(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab,
                          std::span<const double> uniforms);

}  // namespace specula
