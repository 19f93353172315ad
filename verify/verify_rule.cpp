#include "verify/verify_rule.h"

#include "base/error.h"

namespace specula {

bool rule_takes(VerifyRule rule, const TokenTree& tree) {
  if (rule != VerifyRule::kBlock) return true;
  for (int i = 0; i < tree.size(); ++i)
    if (tree.parent[static_cast<std::size_t>(i)] != i - 1) return false;
  return true;
}

VerifyResult verify_with(VerifyRule rule, const TokenTree& tree, std::span<const float> p, std::span<const float> q,
                         int vocab, std::span<const double> uniforms) {
  SPECULA_CHECK(rule_takes(rule, tree), "verify rule '", name_of(rule), "' takes a chain; this tree of ", tree.size(),
                " nodes branches");
  switch (rule) {
    case VerifyRule::kBlock: return verify_block(tree, p, q, vocab, uniforms);
    case VerifyRule::kTraversal: return verify_traversal(tree, p, q, vocab, uniforms);
    case VerifyRule::kToken: break;
  }
  return verify_stochastic(tree, p, q, vocab, uniforms);
}

}  // namespace specula
