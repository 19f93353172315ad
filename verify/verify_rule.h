// defines: VerifyRule, the verification rule a speculative step applies to its target and
// draft distributions (`verify.rule` / `--verify-rule`), and verify_with, the one call that
// dispatches on it. Every rule is a pure function of (tree, p, q, uniforms) in the uniform
// layout of verifier.h, and every rule emits exactly the target's distribution; each rule's
// header states it and why.
//
//   token      token-level rejection sampling (verifier.h): a chain is Leviathan et al.'s rule,
//              a tree SpecInfer's multi-draft rule in the tree's sibling-draw modes; any tree.
//   block      block verification (block_verifier.h, Sun et al. 2025): chains only; keeps at
//              least token-level's expected length over the drafts.
//   traversal  traversal verification (traversal_verifier.h, Weng et al. 2025): any tree in
//              every sibling-draw mode, tested leaf to root; block's result on a chain.
//
// Greedy decoding has one rule: with one-hot target rows every rule keeps the longest prefix
// agreeing with the argmax (verify_greedy), so the rule does not change greedy output.
//
// Usage:
//   const TokenTree tree = proposal.tree;                          // from a Drafter
//   std::vector<float> p = target_rows(tree);                     // [n + 1, vocab]
//   const std::vector<double> u = draw_verify_uniforms(tree, rng);  // fixed layout
//   if (rule_takes(VerifyRule::kBlock, tree)) {
//     const VerifyResult r = verify_with(VerifyRule::kBlock, tree, p, proposal.q, vocab, u);
//     commit(r.accepted_nodes);                                   // root-down node indices
//     emit(r.tokens);                                             // accepted + one drawn token
//   }
#pragma once

#include <span>

#include "base/enum_names.h"
#include "verify/block_verifier.h"
#include "verify/traversal_verifier.h"
#include "verify/verifier.h"

namespace specula {

enum class VerifyRule { kToken, kBlock, kTraversal };

inline std::span<const EnumName<VerifyRule>> enum_names(VerifyRule) {
  static constexpr EnumName<VerifyRule> kNames[] = {
      {VerifyRule::kToken, "token"}, {VerifyRule::kBlock, "block"}, {VerifyRule::kTraversal, "traversal"}};
  return kNames;
}

// Whether `rule` applies to `tree` (block: a chain; token and traversal: any tree).
bool rule_takes(VerifyRule rule, const TokenTree& tree);

// verify_stochastic, verify_block or verify_traversal; throws SpeculaError where rule_takes is
// false.
VerifyResult verify_with(VerifyRule rule, const TokenTree& tree, std::span<const float> p, std::span<const float> q,
                         int vocab, std::span<const double> uniforms);

}  // namespace specula
