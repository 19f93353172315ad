#include "verify/traversal_verifier.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "base/error.h"

namespace specula {
namespace {

// Throws unless the tree's arrays are consistent, its tokens lie in the vocabulary and p and q
// have its shapes.
void check_shapes(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab) {
  const int n = tree.size();
  SPECULA_CHECK(tree.parent.size() == tree.tokens.size() && tree.draw.size() == tree.tokens.size() + 1,
                "verify_traversal: token tree arrays disagree (tokens ", n, ", parent ", tree.parent.size(), ", draw ",
                tree.draw.size(), ")");
  for (int i = 0; i < n; ++i) {
    SPECULA_CHECK(tree.parent[i] >= -1 && tree.parent[i] < i, "verify_traversal: node ", i, " has parent ",
                  tree.parent[i]);
    SPECULA_CHECK(tree.tokens[i] >= 0 && tree.tokens[i] < vocab, "verify_traversal: node ", i, " has token ",
                  tree.tokens[i], " outside the vocabulary [0, ", vocab, ")");
  }
  const std::size_t rows = static_cast<std::size_t>(n + 1) * vocab;
  SPECULA_CHECK(vocab > 0 && p.size() == rows, "verify_traversal: p has ", p.size(), " floats, expected [", n + 1,
                ", ", vocab, "]");
  SPECULA_CHECK(q.empty() || q.size() == rows, "verify_traversal: q has ", q.size(), " floats, expected [", n + 1,
                ", ", vocab, "] or none");
}

// A context on the walk whose children are not all gone: m(v) = alpha * weight(v) / mass, the
// weights being the context's p row (mass 1) until a child is deleted, then owned.
struct OpenContext {
  int context = 0;
  double alpha = 1.0;
  std::span<const float> p_row;
  std::vector<double> weights;  // empty: p_row
  double mass = 1.0;
  SiblingDraw mode = SiblingDraw::kTopK;
  Residual proposal;  // q less the deleted siblings (kWithoutReplacement); the q row (kSampled); unread for kTopK
  int next_child = -1;

  double m(int v) const {
    if (mass <= 0.0) return 0.0;
    const double w = weights.empty() ? double(p_row[v]) : weights[static_cast<std::size_t>(v)];
    return alpha * w / mass;
  }
  // q_j(v) for the next child, whose token is x.
  double q(int v, int x) const {
    if (mode == SiblingDraw::kTopK) return v == x ? 1.0 : 0.0;
    return proposal.weight(v) / proposal.mass();
  }
};

class Traversal {
 public:
  Traversal(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab)
      : tree_(tree), p_(p), q_(q), vocab_(vocab) {}

  TraversalEnd run(const TraversalTest& test) {
    stack_.push_back(open(0, 1.0));
    for (;;) {
      OpenContext& top = stack_.back();
      if (top.next_child >= 0) {
        const int child = top.next_child, x = tree_.tokens[static_cast<std::size_t>(child)];
        const double mx = top.m(x), qx = top.q(x, x);
        // A token the draft could not have drawn (q_j = 0) keeps what its target measure allows.
        const double alpha = mx <= 0.0 ? 0.0 : qx <= 0.0 ? 1.0 : std::min(1.0, mx / qx);
        if (alpha <= 0.0) {
          delete_child(child);  // every test below it has a() = 0: the subtree goes untested
        } else {
          stack_.push_back(open(child + 1, alpha));
        }
        continue;
      }
      if (top.context == 0 || test(top.context - 1, top.alpha)) return end(top);
      const int node = top.context - 1;
      stack_.pop_back();
      delete_child(node);
    }
  }

 private:
  std::span<const float> row(std::span<const float> m, int context) const {
    return m.subspan(static_cast<std::size_t>(context) * vocab_, static_cast<std::size_t>(vocab_));
  }

  OpenContext open(int context, double alpha) const {
    OpenContext c{context, alpha, row(p_, context), {}, 1.0, tree_.draw[static_cast<std::size_t>(context)],
                  Residual(std::span<const float>()), tree_.first_child(context)};
    if (c.next_child >= 0 && c.mode != SiblingDraw::kTopK) {
      SPECULA_CHECK(!q_.empty(), "verify_traversal: context ", context, " has sampled children but no q was given");
      c.proposal = Residual(row(q_, context));
    }
    return c;
  }

  // Deletes `child`, the next child of the top context Y: m_Y <- max(m_Y - q_j, 0) / R with
  // R = sum max(m_Y - q_j, 0) + 1 - a(Y), a(Y) <- sum m_Y; then on to its next sibling.
  void delete_child(int child) {
    OpenContext& y = stack_.back();
    const int x = tree_.tokens[static_cast<std::size_t>(child)];
    std::vector<double> rest(static_cast<std::size_t>(vocab_));
    double rho = 0.0;
    for (int v = 0; v < vocab_; ++v) rho += rest[static_cast<std::size_t>(v)] = std::max(y.m(v) - y.q(v, x), 0.0);
    const double denominator = rho + 1.0 - y.alpha;
    y.alpha = denominator > 0.0 ? rho / denominator : 0.0;
    y.weights = std::move(rest);
    y.mass = rho;
    if (y.mode == SiblingDraw::kWithoutReplacement) y.proposal.remove(x);
    y.next_child = tree_.next_sibling(child);
  }

  static TraversalEnd end(OpenContext& c) {
    return {c.context - 1, c.weights.empty() ? Residual(c.p_row) : Residual::from_weights(std::move(c.weights))};
  }

  const TokenTree& tree_;
  std::span<const float> p_, q_;
  int vocab_;
  std::vector<OpenContext> stack_;
};

}  // namespace

TraversalEnd traverse_tree(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                           const TraversalTest& test) {
  check_shapes(tree, p, q, vocab);
  return Traversal(tree, p, q, vocab).run(test);
}

VerifyResult verify_traversal(const TokenTree& tree, std::span<const float> p, std::span<const float> q, int vocab,
                              std::span<const double> uniforms) {
  SPECULA_CHECK(static_cast<int>(uniforms.size()) == verify_uniform_count(tree), "verify_traversal: ",
                uniforms.size(), " uniforms given, the layout needs ", verify_uniform_count(tree));
  const TraversalEnd end = traverse_tree(tree, p, q, vocab, [&](int node, double alpha) {
    return uniforms[static_cast<std::size_t>(node)] < alpha;
  });
  VerifyResult out;
  for (int i = end.accepted; i >= 0; i = tree.parent[static_cast<std::size_t>(i)]) out.accepted_nodes.push_back(i);
  std::reverse(out.accepted_nodes.begin(), out.accepted_nodes.end());
  for (int i : out.accepted_nodes) out.tokens.push_back(tree.tokens[static_cast<std::size_t>(i)]);
  const int context = end.accepted + 1;
  const double u = uniforms[static_cast<std::size_t>(tree.size() + context)];
  int token = end.final_draw.sample(u);
  // Rounding guard: the measure is empty only where reaching this end had probability ~0.
  if (token < 0) token = Residual(p.subspan(static_cast<std::size_t>(context) * vocab, vocab)).sample(u);
  SPECULA_CHECK(token >= 0, "verify_traversal: the target row of context ", context, " has no mass");
  out.tokens.push_back(token);
  return out;
}

}  // namespace specula
