#include "verify/block_verifier.h"

#include <algorithm>
#include <cstddef>

#include "base/error.h"

namespace specula {
namespace {

// Throws unless `chain` is a chain and p, q and the uniforms have its shapes.
void check_chain(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab) {
  const int n = chain.size();
  SPECULA_CHECK(chain.parent.size() == chain.tokens.size() && chain.draw.size() == chain.tokens.size() + 1,
                "verify_block: token tree arrays disagree (tokens ", n, ", parent ", chain.parent.size(), ", draw ",
                chain.draw.size(), ")");
  for (int i = 0; i < n; ++i) {
    SPECULA_CHECK(chain.parent[i] == i - 1, "verify_block: node ", i, " has parent ", chain.parent[i],
                  "; block verification takes a chain");
    SPECULA_CHECK(chain.tokens[i] >= 0 && chain.tokens[i] < vocab, "verify_block: node ", i, " has token ",
                  chain.tokens[i], " outside the vocabulary [0, ", vocab, ")");
  }
  const std::size_t rows = static_cast<std::size_t>(n + 1) * vocab;
  SPECULA_CHECK(vocab > 0 && p.size() == rows, "verify_block: p has ", p.size(), " floats, expected [", n + 1, ", ",
                vocab, "]");
  SPECULA_CHECK(q.empty() || q.size() == rows, "verify_block: q has ", q.size(), " floats, expected [", n + 1, ", ",
                vocab, "] or none");
  for (int c = 0; c < n; ++c)
    SPECULA_CHECK(chain.draw[c] == SiblingDraw::kTopK || !q.empty(), "verify_block: context ", c,
                  " has a sampled child but no q was given");
}

// q_c(x): the draft row at context c, or the point mass on the chain's next token (kTopK).
double draft_prob(const TokenTree& chain, std::span<const float> q, int vocab, int c, int x) {
  if (chain.draw[c] == SiblingDraw::kTopK) return x == chain.tokens[c] ? 1.0 : 0.0;
  return q[static_cast<std::size_t>(c) * vocab + x];
}

}  // namespace

BlockWeights block_weights(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab) {
  check_chain(chain, p, q, vocab);
  const int g = chain.size();
  BlockWeights w{std::vector<double>(g + 1), std::vector<double>(g + 1)};
  w.keep[0] = 1.0;
  w.stop[0] = 1.0;
  for (int i = 1; i <= g; ++i) {
    const int x = chain.tokens[i - 1];
    const double px = p[static_cast<std::size_t>(i - 1) * vocab + x], qx = draft_prob(chain, q, vocab, i - 1, x);
    const double before = w.keep[i - 1];
    // A token the draft could not have drawn (qx = 0) keeps what its target probability allows.
    w.keep[i] = before <= 0.0 || px <= 0.0 ? 0.0 : qx <= 0.0 ? 1.0 : std::min(1.0, before * px / qx);
  }
  for (int i = 1; i < g; ++i) {
    double rho = 0.0;
    for (int x = 0; x < vocab; ++x)
      rho += std::max(w.keep[i] * p[static_cast<std::size_t>(i) * vocab + x] - draft_prob(chain, q, vocab, i, x), 0.0);
    const double denominator = rho + 1.0 - w.keep[i];
    w.stop[i] = denominator > 0.0 ? rho / denominator : 0.0;
  }
  if (g > 0) w.stop[g] = w.keep[g];
  return w;
}

Residual block_residual(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab,
                        const BlockWeights& weights, int tau) {
  const int g = chain.size();
  SPECULA_CHECK(tau >= 0 && tau <= g && static_cast<int>(weights.keep.size()) == g + 1, "block_residual: tau ", tau,
                " for a chain of ", g, " with ", weights.keep.size(), " weights");
  const auto row = p.subspan(static_cast<std::size_t>(tau) * vocab, static_cast<std::size_t>(vocab));
  if (tau == g) return Residual(row);
  std::vector<double> residual(static_cast<std::size_t>(vocab));
  for (int x = 0; x < vocab; ++x)
    residual[static_cast<std::size_t>(x)] = std::max(weights.keep[tau] * row[x] - draft_prob(chain, q, vocab, tau, x), 0.0);
  return Residual::from_weights(std::move(residual));
}

VerifyResult verify_block(const TokenTree& chain, std::span<const float> p, std::span<const float> q, int vocab,
                          std::span<const double> uniforms) {
  const BlockWeights weights = block_weights(chain, p, q, vocab);
  const int g = chain.size();
  SPECULA_CHECK(static_cast<int>(uniforms.size()) == verify_uniform_count(chain), "verify_block: ", uniforms.size(),
                " uniforms given, the layout needs ", verify_uniform_count(chain));
  int tau = 0;
  for (int i = g; i >= 1 && tau == 0; --i)
    if (uniforms[static_cast<std::size_t>(i - 1)] < weights.stop[static_cast<std::size_t>(i)]) tau = i;
  VerifyResult out;
  for (int i = 0; i < tau; ++i) {
    out.accepted_nodes.push_back(i);
    out.tokens.push_back(chain.tokens[i]);
  }
  const double u = uniforms[static_cast<std::size_t>(g + tau)];
  int token = block_residual(chain, p, q, vocab, weights, tau).sample(u);
  // Rounding guard: the residual is empty only where keeping tau tokens had probability ~0.
  if (token < 0) token = Residual(p.subspan(static_cast<std::size_t>(tau) * vocab, vocab)).sample(u);
  SPECULA_CHECK(token >= 0, "verify_block: the target row of context ", tau, " has no mass");
  out.tokens.push_back(token);
  return out;
}

}  // namespace specula
