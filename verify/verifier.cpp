#include "verify/verifier.h"

#include <algorithm>
#include <cstddef>

#include "base/error.h"
#include "verify/residual.h"

namespace specula {
namespace {

// Sizes of the per-node and per-context arrays the verifiers index.
void check_tree_arrays(const TokenTree& tree) {
  const std::size_t n = tree.tokens.size();
  SPECULA_CHECK(tree.parent.size() == n && tree.draw.size() == n + 1, "verify: token tree arrays disagree (tokens ", n,
                ", parent ", tree.parent.size(), ", draw ", tree.draw.size(), ")");
}

// Walks the accepted path back from `last` (-1 = none accepted) into `out`, root-down.
void fill_path(const TokenTree& tree, int last, VerifyResult& out) {
  for (int i = last; i >= 0; i = tree.parent[i]) out.accepted_nodes.push_back(i);
  std::reverse(out.accepted_nodes.begin(), out.accepted_nodes.end());
  for (int i : out.accepted_nodes) out.tokens.push_back(tree.tokens[i]);
}

}  // namespace

VerifyResult verify_greedy(const TokenTree& tree, std::span<const int> target_argmax) {
  check_tree_arrays(tree);
  const int n = tree.size();
  SPECULA_CHECK(static_cast<int>(target_argmax.size()) == n + 1, "verify_greedy: target_argmax has ",
                target_argmax.size(), " entries, the tree has ", n + 1, " contexts");
  // length[i] = depth of node i if its whole path agrees with the argmax, else 0.
  std::vector<int> length(n, 0);
  int best = -1;
  for (int i = 0; i < n; ++i) {
    const int up = tree.parent[i];
    SPECULA_CHECK(up >= -1 && up < i, "verify_greedy: node ", i, " has parent ", up);
    const bool path_ok = up < 0 || length[up] > 0;
    if (path_ok && tree.tokens[i] == target_argmax[up + 1]) {
      length[i] = (up < 0 ? 0 : length[up]) + 1;
      if (best < 0 || length[i] > length[best]) best = i;
    }
  }
  VerifyResult out;
  fill_path(tree, best, out);
  out.tokens.push_back(target_argmax[best + 1]);
  return out;
}

int verify_uniform_count(const TokenTree& tree) { return 2 * tree.size() + 1; }

std::vector<double> draw_verify_uniforms(const TokenTree& tree, Philox& rng) {
  std::vector<double> uniforms(verify_uniform_count(tree));
  for (double& u : uniforms) u = rng.uniform();
  return uniforms;
}

VerifyResult verify_stochastic(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                               std::span<const double> uniforms) {
  check_tree_arrays(tree);
  const int n = tree.size();
  const std::size_t rows = static_cast<std::size_t>(n + 1) * vocab;
  SPECULA_CHECK(vocab > 0 && p.size() == rows, "verify_stochastic: p has ", p.size(), " floats, expected [", n + 1,
                ", ", vocab, "]");
  SPECULA_CHECK(q.empty() || q.size() == rows, "verify_stochastic: q has ", q.size(), " floats, expected [", n + 1,
                ", ", vocab, "] or none");
  SPECULA_CHECK(static_cast<int>(uniforms.size()) == verify_uniform_count(tree), "verify_stochastic: ", uniforms.size(),
                " uniforms given, the layout needs ", verify_uniform_count(tree));
  auto row = [&](std::span<const float> m, int context) { return m.subspan(std::size_t(context) * vocab, vocab); };

  int context = 0, last = -1;
  for (;;) {
    const SiblingDraw mode = tree.draw[context];
    const int first = tree.first_child(context);
    const bool reads_q = first >= 0 && mode != SiblingDraw::kTopK;
    SPECULA_CHECK(!reads_q || !q.empty(), "verify_stochastic: context ", context,
                  " has sampled children but no q was given");
    Residual r(row(p, context));
    Residual qj(reads_q ? row(q, context) : std::span<const float>());
    int accepted = -1;
    for (int child = first; child >= 0 && accepted < 0; child = tree.next_sibling(child)) {
      const int x = tree.tokens[child];
      SPECULA_CHECK(x >= 0 && x < vocab, "verify_stochastic: node ", child, " has token ", x,
                    " outside the vocabulary [0, ", vocab, ")");
      // u < r(x)/r.mass / (q_j(x)/q_j.mass), without dividing; q_j = delta(x) for kTopK.
      const double qx = mode == SiblingDraw::kTopK ? 1.0 : qj.weight(x);
      const double q_mass = mode == SiblingDraw::kTopK ? 1.0 : qj.mass();
      if (uniforms[child] * qx * r.mass() < r.weight(x) * q_mass) {
        accepted = child;
      } else if (mode == SiblingDraw::kTopK) {
        r.remove(x);
      } else {
        r.subtract(qj);
        if (mode == SiblingDraw::kWithoutReplacement) qj.remove(x);
      }
    }
    if (accepted >= 0) {
      last = accepted;
      context = accepted + 1;
      continue;
    }
    VerifyResult out;
    fill_path(tree, last, out);
    const double u = uniforms[n + context];
    int token = r.sample(u);
    // Rounding guard: the residual can only be empty after a rejection of probability ~0.
    if (token < 0) token = Residual(row(p, context)).sample(u);
    SPECULA_CHECK(token >= 0, "verify_stochastic: the target row of context ", context, " has no mass");
    out.tokens.push_back(token);
    return out;
  }
}

}  // namespace specula
