// defines: helpers of the [verify] and [draft] statistical tests: the chi-square
// goodness-of-fit test (with its p-value) and its power against laws at a given total
// variation, a toy second-order Markov target and draft over a tiny vocabulary (so that
// multi-token sequences are enumerable), a static-tree drafter over it, and a driver that
// generates tokens by repeated speculative steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "draft/sibling_draw.h"
#include "base/rng.h"
#include "verify/residual.h"
#include "verify/token_tree.h"
#include "verify/verifier.h"

namespace specula::test {

// Q(a, x), the upper regularised incomplete gamma function (series below a + 1, Lentz's
// continued fraction above; Numerical Recipes 6.2). P-value of chi-square: Q(df/2, X2/2).
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > std::abs(sum) * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

struct ChiSquare {
  double statistic = 0.0;
  int df = 0;
  double p_value = 1.0;
  long impossible = 0;  // samples that landed in cells of probability 0 (must be 0)
};

// Pearson's test of `observed` counts against exact cell probabilities. Cells expecting
// fewer than 5 samples are pooled into one cell; cells of probability 0 are excluded and
// their counts reported in `impossible`.
inline ChiSquare chi_square(std::span<const long> observed, std::span<const double> probs) {
  long total = 0;
  for (long o : observed) total += o;
  ChiSquare out;
  double pooled_expected = 0.0, pooled_observed = 0.0;
  int cells = 0;
  for (std::size_t i = 0; i < observed.size(); ++i) {
    const double expected = probs[i] * total;
    if (probs[i] <= 0.0) {
      out.impossible += observed[i];
    } else if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += observed[i];
    } else {
      out.statistic += (observed[i] - expected) * (observed[i] - expected) / expected;
      ++cells;
    }
  }
  if (pooled_expected > 0.0) {
    out.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  out.df = cells - 1;
  out.p_value = gamma_q(out.df / 2.0, out.statistic / 2.0);
  return out;
}

// Total variation distance between two laws over the same cells.
inline double total_variation(std::span<const double> a, std::span<const double> b) {
  double tv = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) tv += std::abs(a[i] - b[i]) / 2;
  return tv;
}

// The power of chi_square against `probs` at level `alpha` when the n counts are drawn from
// `truth`: the share of `trials` multinomial samples (drawn with Philox(seed)) whose p-value is
// below alpha.
inline double chi_square_power(std::span<const double> probs, std::span<const double> truth, long n, double alpha,
                               int trials, uint64_t seed) {
  std::vector<double> cumulative(truth.size());
  double total = 0.0;
  for (std::size_t i = 0; i < truth.size(); ++i) cumulative[i] = total += truth[i];
  Philox rng(seed);
  std::vector<long> counts(truth.size());
  int rejected = 0;
  for (int t = 0; t < trials; ++t) {
    std::fill(counts.begin(), counts.end(), 0L);
    for (long s = 0; s < n; ++s) {
      const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), rng.uniform() * total);
      ++counts[std::min<std::size_t>(static_cast<std::size_t>(it - cumulative.begin()), truth.size() - 1)];
    }
    rejected += chi_square(counts, probs).p_value < alpha;
  }
  return static_cast<double>(rejected) / trials;
}

// The law at total variation `tv` from `probs` on the segment towards `away` (tv at most
// TV(probs, away)): probs + (tv / TV(probs, away)) (away - probs).
inline std::vector<double> toward(std::span<const double> probs, std::span<const double> away, double tv) {
  const double t = tv / total_variation(probs, away);
  std::vector<double> out(probs.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = probs[i] + t * (away[i] - probs[i]);
  return out;
}

// The smallest total variation from `probs` towards `away` (within 1% of it, by bisection) at
// which chi_square_power reaches `power`; TV(probs, away) itself when it never does before.
inline double tv_at_power(std::span<const double> probs, std::span<const double> away, long n, double alpha,
                          double power, int trials, uint64_t seed) {
  double lo = 0.0, hi = total_variation(probs, away);
  if (chi_square_power(probs, toward(probs, away, hi), n, alpha, trials, seed) < power)
    return std::numeric_limits<double>::infinity();
  while (hi - lo > 0.01 * hi) {
    const double mid = (lo + hi) / 2;
    (chi_square_power(probs, toward(probs, away, mid), n, alpha, trials, seed) >= power ? hi : lo) = mid;
  }
  return hi;
}

// Target p and draft q: next-token distributions given the last two tokens (a, b). The
// rows come in four shapes (by (a + 3b) % 4): dense random; q = 0 on a token where p > 0;
// p = 0 on a token where q > 0; partly disjoint supports with a peaked p.
struct ToyModels {
  int vocab = 0;
  std::vector<float> p, q;  // [vocab * vocab, vocab], row a * vocab + b

  std::span<const float> p_row(int a, int b) const { return row(p, a, b); }
  std::span<const float> q_row(int a, int b) const { return row(q, a, b); }

 private:
  std::span<const float> row(const std::vector<float>& m, int a, int b) const {
    return std::span<const float>(m).subspan(std::size_t(a * vocab + b) * vocab, vocab);
  }
};

inline ToyModels make_toy_models(int vocab, uint64_t seed) {
  ToyModels m;
  m.vocab = vocab;
  Philox rng(seed);
  auto fill = [&](std::vector<float>& dst, std::vector<double> w) {
    double sum = 0.0;
    for (double x : w) sum += x;
    for (double x : w) dst.push_back(float(x / sum));
  };
  for (int a = 0; a < vocab; ++a) {
    for (int b = 0; b < vocab; ++b) {
      std::vector<double> wp(vocab), wq(vocab);
      for (int v = 0; v < vocab; ++v) {
        wp[v] = 0.05 + rng.uniform();
        wq[v] = 0.05 + rng.uniform();
      }
      const int special = (a + 2 * b) % vocab;
      switch ((a + 3 * b) % 4) {
        case 1: wq[special] = 0.0; break;
        case 2: wp[special] = 0.0; break;
        case 3:
          for (int v = 0; v < vocab; ++v) {
            if (v % 2 == 0) wq[v] = 0.0;  // q on odd tokens only
            if (v % 3 == 2) wp[v] = 0.0;
            if (v == special) wp[v] = 4.0 * vocab;
          }
          break;
        default: break;
      }
      fill(m.p, wp);
      fill(m.q, wq);
    }
  }
  return m;
}

// The last two tokens seen at every context of `tree` when the committed text ends a, b.
struct ContextTail {
  std::vector<int> a, b;  // [n + 1]
};
inline ContextTail context_tails(const TokenTree& tree, int a, int b) {
  ContextTail t{{a}, {b}};
  for (int i = 0; i < tree.size(); ++i) {
    t.a.push_back(t.b[tree.parent[i] + 1]);
    t.b.push_back(tree.tokens[i]);
  }
  return t;
}

// p and q rows [n + 1, vocab] of the toy models at every context of `tree`.
struct StepRows {
  std::vector<float> p, q;
};
inline StepRows step_rows(const ToyModels& m, const TokenTree& tree, int a, int b) {
  const ContextTail t = context_tails(tree, a, b);
  StepRows rows;
  for (int c = 0; c < tree.num_contexts(); ++c) {
    const auto pr = m.p_row(t.a[c], t.b[c]), qr = m.q_row(t.a[c], t.b[c]);
    rows.p.insert(rows.p.end(), pr.begin(), pr.end());
    rows.q.insert(rows.q.end(), qr.begin(), qr.end());
  }
  return rows;
}

// A static tree drafted from the toy draft: every node at depth d (the root is depth 0)
// gets branching[d] children drawn from q in mode modes[d].
inline TokenTree draft_static_tree(const ToyModels& m, std::span<const int> branching,
                                   std::span<const SiblingDraw> modes, int a, int b, Philox& rng) {
  TokenTree tree(modes[0]);
  std::vector<int> level{-1}, tail_a{a}, tail_b{b};  // frontier nodes and their last two tokens
  for (std::size_t d = 0; d < branching.size(); ++d) {
    std::vector<int> next, next_a, next_b;
    for (std::size_t f = 0; f < level.size(); ++f) {
      tree.draw[level[f] + 1] = modes[d];
      for (int x : draw_siblings(m.q_row(tail_a[f], tail_b[f]), branching[d], modes[d], rng)) {
        next.push_back(tree.add_node(level[f], x));
        next_a.push_back(tail_b[f]);
        next_b.push_back(x);
      }
    }
    level = std::move(next);
    tail_a = std::move(next_a);
    tail_b = std::move(next_b);
  }
  return tree;
}

// Proposes a tree given the text so far (at least two tokens).
using Drafter = std::function<TokenTree(std::span<const int> text, Philox& rng)>;
// verify_stochastic's signature; tests wrap it to make deliberately broken verifiers.
using StochasticVerifier = std::function<VerifyResult(
    const TokenTree&, std::span<const float> p, std::span<const float> q, int vocab, std::span<const double> uniforms)>;

// Appends at least `count` tokens to `text` by speculative steps (draft, verify, commit)
// and returns the first `count` generated. One rng serves drafting and verification.
inline std::vector<int> speculate(const ToyModels& m, std::vector<int> text, int count, const Drafter& drafter,
                                  const StochasticVerifier& verifier, Philox& rng) {
  const std::size_t start = text.size();
  while (text.size() < start + count) {
    const int a = text[text.size() - 2], b = text.back();
    const TokenTree tree = drafter(text, rng);
    const StepRows rows = step_rows(m, tree, a, b);
    const std::vector<double> uniforms = draw_verify_uniforms(tree, rng);
    const VerifyResult r = verifier(tree, rows.p, rows.q, m.vocab, uniforms);
    text.insert(text.end(), r.tokens.begin(), r.tokens.end());
  }
  return std::vector<int>(text.begin() + start, text.begin() + start + count);
}

// Exact target probability of every sequence of `count` tokens after text ending a, b;
// index = the sequence read as a base-vocab number, first token most significant.
inline std::vector<double> exact_sequence_probs(const ToyModels& m, int a, int b, int count) {
  std::vector<double> probs{1.0};
  std::vector<int> ta{a}, tb{b};  // last two tokens after each prefix
  for (int step = 0; step < count; ++step) {
    std::vector<double> next;
    std::vector<int> na, nb;
    for (std::size_t s = 0; s < probs.size(); ++s)
      for (int x = 0; x < m.vocab; ++x) {
        next.push_back(probs[s] * m.p_row(ta[s], tb[s])[x]);
        na.push_back(tb[s]);
        nb.push_back(x);
      }
    probs = std::move(next);
    ta = std::move(na);
    tb = std::move(nb);
  }
  return probs;
}

// Outcome of a losslessness experiment: chi-square of the first token and of the first
// `count` tokens (each joint with the prompt) against the exact target.
struct Lossless {
  ChiSquare first, joint;
};

// Each sample picks one of `prompts` uniformly (each at least two tokens long), then
// generates `count` tokens speculatively. Cells: (prompt, first token) and (prompt, first
// `count` tokens), with exact probabilities P(prompt) * P_target(tokens | prompt).
inline Lossless lossless_experiment(const ToyModels& m, const std::vector<std::vector<int>>& prompts, int count,
                                    long samples, const Drafter& drafter, const StochasticVerifier& verifier,
                                    uint64_t seed) {
  const std::size_t firsts = m.vocab, sequences = static_cast<std::size_t>(std::pow(m.vocab, count));
  std::vector<long> first(prompts.size() * firsts, 0), joint(prompts.size() * sequences, 0);
  Philox rng(seed);
  for (long s = 0; s < samples; ++s) {
    const std::size_t k = static_cast<std::size_t>(rng.uniform() * prompts.size());
    const std::vector<int> out = speculate(m, prompts[k], count, drafter, verifier, rng);
    std::size_t index = 0;
    for (int x : out) index = index * m.vocab + x;
    ++first[k * firsts + out[0]];
    ++joint[k * sequences + index];
  }
  std::vector<double> first_probs, joint_probs;
  for (const auto& prompt : prompts) {
    const int a = prompt[prompt.size() - 2], b = prompt.back();
    for (double pr : exact_sequence_probs(m, a, b, 1)) first_probs.push_back(pr / prompts.size());
    for (double pr : exact_sequence_probs(m, a, b, count)) joint_probs.push_back(pr / prompts.size());
  }
  return {chi_square(first, first_probs), chi_square(joint, joint_probs)};
}

// Deliberately broken verifiers, to show that the statistical tests can fail.

// The context whose children (if any) were all rejected: after the last accepted node.
inline int final_context(const VerifyResult& r) { return r.accepted_nodes.empty() ? 0 : r.accepted_nodes.back() + 1; }

// Broken: after a rejection, the correction is drawn from p instead of the residual.
inline VerifyResult resample_from_target(const TokenTree& tree, std::span<const float> p, std::span<const float> q,
                                         int vocab, std::span<const double> uniforms) {
  VerifyResult r = verify_stochastic(tree, p, q, vocab, uniforms);
  const int c = final_context(r);
  if (tree.first_child(c) >= 0)
    r.tokens.back() = Residual(p.subspan(std::size_t(c) * vocab, vocab)).sample(uniforms[tree.size() + c]);
  return r;
}

// Broken (chains): the correction is drawn from max(p - q, 0) without renormalising it
// (u is compared with the raw prefix sums; past the end, the last token of the residual).
inline VerifyResult unnormalised_residual(const TokenTree& tree, std::span<const float> p, std::span<const float> q,
                                          int vocab, std::span<const double> uniforms) {
  VerifyResult r = verify_stochastic(tree, p, q, vocab, uniforms);
  const int c = final_context(r);
  if (tree.first_child(c) < 0) return r;
  double cumulative = 0.0;
  for (int v = 0; v < vocab; ++v) {
    const double w = std::max(double(p[c * vocab + v]) - q[c * vocab + v], 0.0);
    if (w <= 0.0) continue;
    r.tokens.back() = v;
    cumulative += w;
    if (cumulative > uniforms[tree.size() + c]) break;
  }
  return r;
}

// Broken: the tree is verified as if its siblings had been drawn in another mode.
inline StochasticVerifier as_if(SiblingDraw mode) {
  return [mode](const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                std::span<const double> uniforms) {
    TokenTree relabelled = tree;
    std::fill(relabelled.draw.begin(), relabelled.draw.end(), mode);
    return verify_stochastic(relabelled, p, q, vocab, uniforms);
  };
}

}  // namespace specula::test
