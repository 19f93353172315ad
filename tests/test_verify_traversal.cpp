// Traversal verification (verify/traversal_verifier.h): its exact output law, computed from the
// implementation's own a() and final measures (traverse_tree, every way the walk can end) over
// every draft tree of chains, wide roots, a 2×2 tree and unbalanced trees on toy models, equals
// the target's in each sibling-draw mode; on chains it gives verify_block's result, draw for
// draw; its expected accepted length over the drafts against token-level's; with one-hot target
// rows it is greedy verification; its name, the trees it takes and its refusals.
//
// The toy rows are rounded to multiples of 2^-20 summing to exactly 1, so the laws are exact up
// to double rounding and the output law is held to 1e-9 in total variation.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "draft/sibling_draw.h"
#include "test_verify_support.h"
#include "verify/block_verifier.h"
#include "verify/traversal_verifier.h"
#include "verify/verify_rule.h"

namespace specula {
namespace {

using test::StepRows;
using test::ToyModels;

constexpr SiblingDraw kModes[] = {SiblingDraw::kSampled, SiblingDraw::kWithoutReplacement, SiblingDraw::kTopK};

const char* mode_name(SiblingDraw mode) {
  return mode == SiblingDraw::kSampled ? "sampled" : mode == SiblingDraw::kTopK ? "top-k" : "without replacement";
}

// test::make_toy_models with every row rounded to multiples of 2^-20 that sum to exactly 1
// (zeros stay zeros).
ToyModels exact_toy_models(int vocab, uint64_t seed) {
  ToyModels m = test::make_toy_models(vocab, seed);
  constexpr long kUnits = 1L << 20;
  for (std::vector<float>* rows : {&m.p, &m.q}) {
    for (std::size_t at = 0; at < rows->size(); at += static_cast<std::size_t>(vocab)) {
      std::vector<long> units(static_cast<std::size_t>(vocab));
      long total = 0;
      std::size_t largest = 0;
      for (std::size_t v = 0; v < units.size(); ++v) {
        total += units[v] = std::lround(double((*rows)[at + v]) * kUnits);
        if (units[v] > units[largest]) largest = v;
      }
      units[largest] += kUnits - total;
      for (std::size_t v = 0; v < units.size(); ++v) (*rows)[at + v] = static_cast<float>(double(units[v]) / kUnits);
    }
  }
  return m;
}

// A tree shape: each node's parent (-1: the root), parents first, siblings in node order.
struct Shape {
  const char* name;
  std::vector<int> parent;
  int depth() const {
    std::vector<int> d(parent.size());
    int deepest = 0;
    for (std::size_t i = 0; i < parent.size(); ++i) deepest = std::max(deepest, d[i] = parent[i] < 0 ? 1 : d[parent[i]] + 1);
    return deepest;
  }
};

// One draft tree with its probability under the toy draft.
struct Draft {
  TokenTree tree;
  double probability = 0;
};

// Every draft tree of `shape` after a text ending (a, b), each context's children drawn from the
// toy draft in `mode`. A node that cannot be drawn (kWithoutReplacement or kTopK with q's support
// used up) is left out with its subtree, as draw_siblings returns fewer children.
class DraftEnumeration {
 public:
  DraftEnumeration(const ToyModels& m, const Shape& shape, SiblingDraw mode, int a, int b)
      : m_(m), shape_(shape), mode_(mode), a_(a), b_(b) {}

  std::vector<Draft> all() {
    out_.clear();
    std::vector<int> placed;  // shape node -> tree node, -1: left out
    grow(Draft{TokenTree(mode_), 1.0}, placed);
    return std::move(out_);
  }

 private:
  void grow(const Draft& d, std::vector<int>& placed) {
    const std::size_t i = placed.size();
    if (i == shape_.parent.size()) {
      out_.push_back(d);
      return;
    }
    const int shape_parent = shape_.parent[i];
    const int tree_parent = shape_parent < 0 ? -1 : placed[static_cast<std::size_t>(shape_parent)];
    if (shape_parent >= 0 && tree_parent < 0) return skip(d, placed);
    const test::ContextTail tail = test::context_tails(d.tree, a_, b_);
    const int context = tree_parent + 1;
    const auto q = m_.q_row(tail.a[context], tail.b[context]);
    const std::vector<int> earlier = d.tree.children(context);
    if (mode_ == SiblingDraw::kTopK) {
      Philox unused(0);
      const std::vector<int> top = draw_siblings(q, static_cast<int>(earlier.size()) + 1, SiblingDraw::kTopK, unused);
      if (top.size() <= earlier.size()) return skip(d, placed);
      return place(d, placed, tree_parent, top.back(), 1.0);
    }
    double mass = 1.0;  // exact: the rows are dyadic
    std::vector<bool> taken(static_cast<std::size_t>(m_.vocab), false);
    if (mode_ == SiblingDraw::kWithoutReplacement)
      for (int node : earlier) {
        const int x = d.tree.tokens[static_cast<std::size_t>(node)];
        mass -= q[x];
        taken[static_cast<std::size_t>(x)] = true;
      }
    if (mass <= 0.0) return skip(d, placed);
    for (int x = 0; x < m_.vocab; ++x)
      if (q[x] > 0.0f && !taken[static_cast<std::size_t>(x)]) place(d, placed, tree_parent, x, q[x] / mass);
  }

  void place(const Draft& d, std::vector<int>& placed, int tree_parent, int token, double probability) {
    Draft next = d;
    placed.push_back(next.tree.add_node(tree_parent, token));
    next.probability *= probability;
    grow(next, placed);
    placed.pop_back();
  }

  void skip(const Draft& d, std::vector<int>& placed) {
    placed.push_back(-1);
    grow(d, placed);
    placed.pop_back();
  }

  const ToyModels& m_;
  const Shape& shape_;
  SiblingDraw mode_;
  int a_, b_;
  std::vector<Draft> out_;
};

// One way a traversal can end, with its probability over the node tests.
struct Ending {
  int accepted;  // -1: the root's draw
  double probability;
  Residual draw;
};

// Every ending of traverse_tree on `tree`: the first k tests rejected and the next accepted,
// k = 0, 1, ..., until every test is rejected (the root's draw).
std::vector<Ending> endings(const TokenTree& tree, const StepRows& rows, int vocab) {
  std::vector<Ending> out;
  for (std::size_t k = 0;; ++k) {
    std::vector<double> alphas;
    TraversalEnd end = traverse_tree(tree, rows.p, rows.q, vocab, [&](int, double alpha) {
      alphas.push_back(alpha);
      return alphas.size() == k + 1;
    });
    double probability = 1.0;
    for (std::size_t i = 0; i < alphas.size(); ++i) probability *= i == k ? alphas[i] : 1.0 - alphas[i];
    out.push_back({end.accepted, probability, std::move(end.final_draw)});
    if (alphas.size() <= k) return out;
  }
}

// The tokens of the path root..node (empty for -1).
std::vector<int> path_tokens(const TokenTree& tree, int node) {
  std::vector<int> tokens;
  tree.path_tokens(node + 1, tokens);
  return tokens;
}

// The law of the first `count` tokens after a text ending (a, b) under one traversal-verified
// step over the drafts of `shape`, the tokens after the step's emission continuing from the
// target; index = the tokens as a base-vocab number, first most significant. Also the expected
// number of accepted draft tokens.
struct StepLaw {
  std::vector<double> law;
  double expected_accepted = 0.0;
};
StepLaw traversal_step_law(const ToyModels& m, const Shape& shape, SiblingDraw mode, int a, int b, int count) {
  StepLaw out{std::vector<double>(static_cast<std::size_t>(std::pow(m.vocab, count)), 0.0)};
  for (const Draft& d : DraftEnumeration(m, shape, mode, a, b).all()) {
    const StepRows rows = test::step_rows(m, d.tree, a, b);
    for (const Ending& e : endings(d.tree, rows, m.vocab)) {
      if (e.probability <= 0.0) continue;
      const std::vector<int> kept = path_tokens(d.tree, e.accepted);
      out.expected_accepted += d.probability * e.probability * static_cast<double>(kept.size());
      // verify_traversal's rounding guard: an empty measure (an ending of probability ~0) draws from p.
      const Residual draw = e.draw.mass() > 0.0 ? e.draw : Residual(std::span<const float>(rows.p).subspan(
                                                                static_cast<std::size_t>(e.accepted + 1) * m.vocab,
                                                                static_cast<std::size_t>(m.vocab)));
      for (int y = 0; y < m.vocab; ++y) {
        const double py = draw.weight(y) / draw.mass();
        if (py <= 0.0) continue;
        std::vector<int> emitted = kept;
        emitted.push_back(y);
        const int rest = count - static_cast<int>(emitted.size());
        const int ea = emitted.size() >= 2 ? emitted[emitted.size() - 2] : b, eb = emitted.back();
        const std::vector<double> tail = test::exact_sequence_probs(m, ea, eb, rest);
        std::size_t head = 0;
        for (int x : emitted) head = head * static_cast<std::size_t>(m.vocab) + static_cast<std::size_t>(x);
        for (std::size_t t = 0; t < tail.size(); ++t)
          out.law[head * tail.size() + t] += d.probability * e.probability * py * tail[t];
      }
    }
  }
  return out;
}

// Token-level verification's expected accepted length below `context` (verify_stochastic's
// acceptance probabilities): sum over the children of P(child j accepted) (1 + its own).
double token_level_expected(const TokenTree& tree, const StepRows& rows, int vocab, int context) {
  const auto row = [&](const std::vector<float>& m) {
    return std::span<const float>(m).subspan(static_cast<std::size_t>(context) * vocab, static_cast<std::size_t>(vocab));
  };
  const SiblingDraw mode = tree.draw[static_cast<std::size_t>(context)];
  Residual r(row(rows.p)), qj(row(rows.q));
  double reach = 1.0, expected = 0.0;
  for (int child = tree.first_child(context); child >= 0; child = tree.next_sibling(child)) {
    const int x = tree.tokens[static_cast<std::size_t>(child)];
    const double qx = mode == SiblingDraw::kTopK ? 1.0 : qj.weight(x) / qj.mass(), rx = r.weight(x) / r.mass();
    const double accept = rx <= 0.0 ? 0.0 : qx <= 0.0 ? 1.0 : std::min(1.0, rx / qx);
    expected += reach * accept * (1.0 + token_level_expected(tree, rows, vocab, child + 1));
    reach *= 1.0 - accept;
    if (mode == SiblingDraw::kTopK) {
      r.remove(x);
    } else {
      r.subtract(qj);
      if (mode == SiblingDraw::kWithoutReplacement) qj.remove(x);
    }
  }
  return expected;
}

double token_level_step_expected(const ToyModels& m, const Shape& shape, SiblingDraw mode, int a, int b) {
  double expected = 0.0;
  for (const Draft& d : DraftEnumeration(m, shape, mode, a, b).all())
    expected += d.probability * token_level_expected(d.tree, test::step_rows(m, d.tree, a, b), m.vocab, 0);
  return expected;
}

// The four row shapes of make_toy_models: (a + 3b) % 4 = 0, 1, 2, 3.
const std::vector<std::pair<int, int>> kTails = {{3, 3}, {2, 1}, {0, 2}, {0, 1}};

const std::vector<Shape> kSmallShapes = {
    {"chain 1", {-1}},
    {"chain 2", {-1, 0}},
    {"chain 3", {-1, 0, 1}},
    {"chain 4", {-1, 0, 1, 2}},
    {"root 2 wide", {-1, -1}},
    {"root 3 wide", {-1, -1, -1}},
    {"2 wide, the first deeper", {-1, -1, 0, 2}},
    {"2 wide, the second forked", {-1, -1, 1, 1}},
};
const std::vector<Shape> kLargeShapes = {
    {"2x2", {-1, -1, 0, 0, 1, 1}},
    {"3 wide, one chain of 3 and a fork", {-1, -1, -1, 0, 3, 1, 1}},
};

}  // namespace

TEST_CASE("traversal verification's exact output law is the target's", "[verify]") {
  double worst = 0.0;
  int cases = 0;
  const auto check = [&](const ToyModels& m, const Shape& shape, SiblingDraw mode, int a, int b) {
    INFO("vocab " << m.vocab << ", " << shape.name << ", " << mode_name(mode) << ", tail " << a << " " << b);
    const int count = shape.depth() + 1;
    const double tv = test::total_variation(traversal_step_law(m, shape, mode, a, b, count).law,
                                            test::exact_sequence_probs(m, a, b, count));
    CHECK(tv < 1e-9);
    worst = std::max(worst, tv);
    ++cases;
  };
  for (const uint64_t seed : {2024u, 7u, 99u}) {
    const ToyModels m = exact_toy_models(4, seed);
    for (const Shape& shape : kSmallShapes)
      for (const SiblingDraw mode : kModes)
        for (const auto& [a, b] : kTails) check(m, shape, mode, a, b);
  }
  for (const ToyModels& m : {exact_toy_models(3, 5), exact_toy_models(4, 11)})
    for (const Shape& shape : kLargeShapes)
      for (const SiblingDraw mode : kModes)
        for (const auto& [a, b] : kTails) check(m, shape, mode, a % m.vocab, b % m.vocab);
  INFO(cases << " cases, largest total variation " << worst);
  CHECK(cases == 3 * 8 * 3 * 4 + 2 * 2 * 3 * 4);
}

TEST_CASE("traversal verification of a chain is block verification, draw for draw", "[verify]") {
  Philox rng(34);
  const auto random_row = [&](int vocab, std::vector<float>& out) {
    std::vector<double> w(static_cast<std::size_t>(vocab));
    double sum = 0.0;
    for (double& v : w) sum += v = rng.uniform() < 0.25 ? 0.0 : rng.uniform();
    if (sum <= 0.0) sum = w[0] = 1.0;
    for (double v : w) out.push_back(static_cast<float>(v / sum));
  };
  int kept = 0, cut = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int vocab = 2 + static_cast<int>(rng.uniform() * 6), g = static_cast<int>(rng.uniform() * 7);
    const SiblingDraw mode = kModes[trial % 3];
    std::vector<float> p, q;
    for (int c = 0; c <= g; ++c) {
      random_row(vocab, p);
      random_row(vocab, q);
    }
    std::vector<int> tokens;
    for (int i = 0; i < g; ++i) tokens.push_back(static_cast<int>(rng.uniform() * vocab));
    const TokenTree chain = TokenTree::chain(tokens, mode);
    const std::vector<double> u = draw_verify_uniforms(chain, rng);
    const std::span<const float> q_given = mode == SiblingDraw::kTopK && trial % 2 ? std::span<const float>() : q;
    const VerifyResult block = verify_block(chain, p, q_given, vocab, u);
    const VerifyResult traversal = verify_traversal(chain, p, q_given, vocab, u);
    INFO("trial " << trial << ", vocab " << vocab << ", g " << g << ", " << mode_name(mode));
    CHECK(traversal.accepted_nodes == block.accepted_nodes);
    CHECK(traversal.tokens == block.tokens);
    (static_cast<int>(block.accepted_nodes.size()) == g ? kept : cut) += 1;
  }
  CHECK(kept > 50);  // both endings are exercised
  CHECK(cut > 50);
}

TEST_CASE("traversal verification through its uniforms emits the target distribution", "[verify]") {
  // test_verify_lossless.cpp's experiment: 10^5 samples, the first three tokens jointly with the
  // prompt, alpha 1e-3; a 2-2 tree drawn without replacement, then a chain step.
  const ToyModels m = test::make_toy_models(4, 2024);
  const std::vector<std::vector<int>> prompts{{3, 3}, {2, 1}, {0, 2}, {0, 1}};
  const test::Drafter tree = [&](std::span<const int> text, Philox& rng) {
    const std::vector<int> branching{2, 2, 1};
    const std::vector<SiblingDraw> modes{SiblingDraw::kWithoutReplacement, SiblingDraw::kWithoutReplacement,
                                         SiblingDraw::kSampled};
    return test::draft_static_tree(m, branching, modes, text[text.size() - 2], text.back(), rng);
  };
  const test::Lossless r = test::lossless_experiment(m, prompts, 3, 100000, tree, verify_traversal, 63);
  INFO("first token: X2 = " << r.first.statistic << ", p = " << r.first.p_value);
  INFO("three tokens: X2 = " << r.joint.statistic << ", df = " << r.joint.df << ", p = " << r.joint.p_value);
  CHECK(r.first.impossible == 0);
  CHECK(r.joint.impossible == 0);
  CHECK(r.first.p_value > 1e-3);
  CHECK(r.joint.p_value > 1e-3);
}

TEST_CASE("traversal verification's expected accepted length over the drafts against token-level's", "[verify]") {
  // Exact expectations over the drafts of each shape. Depth-1 trees: the rules coincide (the root's
  // a() stays 1, so the update is token-level's residual). Deeper trees: traversal keeps at least
  // token-level's expected length in every case here.
  double largest_gain = 0.0, smallest_gain = 1.0;
  for (const uint64_t seed : {2024u, 7u, 99u}) {
    const ToyModels m = exact_toy_models(4, seed);
    for (const Shape& shape : kSmallShapes)
      for (const SiblingDraw mode : kModes)
        for (const auto& [a, b] : kTails) {
          const double traversal = traversal_step_law(m, shape, mode, a, b, shape.depth() + 1).expected_accepted;
          const double token = token_level_step_expected(m, shape, mode, a, b);
          INFO("seed " << seed << ", " << shape.name << ", " << mode_name(mode) << ", tail " << a << " " << b
                       << ": token-level " << token << ", traversal " << traversal);
          CHECK(traversal >= token - 1e-12);
          if (shape.depth() == 1) CHECK(traversal == Approx(token).margin(1e-12));
          largest_gain = std::max(largest_gain, traversal - token);
          if (shape.depth() > 1) smallest_gain = std::min(smallest_gain, traversal - token);
        }
  }
  INFO("gain: smallest " << smallest_gain << ", largest " << largest_gain);
  CHECK(largest_gain > 1e-2);
}

TEST_CASE("traversal verification with one-hot target rows is greedy verification", "[verify]") {
  Philox rng(6);
  const int vocab = 6;
  int accepted = 0;
  for (int trial = 0; trial < 500; ++trial) {
    // A random tree with distinct siblings (greedy keeps one path) in random draw modes.
    TokenTree tree(kModes[trial % 3]);
    const int n = static_cast<int>(rng.uniform() * 9);
    for (int i = 0; i < n; ++i) {
      const int parent = static_cast<int>(rng.uniform() * (tree.size() + 1)) - 1;
      std::vector<int> siblings;
      for (int s : tree.children(parent + 1)) siblings.push_back(tree.tokens[static_cast<std::size_t>(s)]);
      if (siblings.size() >= 3) continue;
      int token = static_cast<int>(rng.uniform() * 3);  // often the argmax
      while (std::find(siblings.begin(), siblings.end(), token) != siblings.end()) token = (token + 1) % vocab;
      tree.add_node(parent, token);
      tree.draw.back() = kModes[static_cast<int>(rng.uniform() * 3)];
    }
    std::vector<int> argmax;
    std::vector<float> p, q;
    for (int c = 0; c < tree.num_contexts(); ++c) {
      argmax.push_back(static_cast<int>(rng.uniform() * 3));
      for (int x = 0; x < vocab; ++x) p.push_back(x == argmax.back() ? 1.0f : 0.0f);
      std::vector<double> w(vocab);
      double sum = 0;
      for (double& v : w) sum += v = 0.01 + rng.uniform();
      for (double v : w) q.push_back(static_cast<float>(v / sum));
    }
    const VerifyResult traversal = verify_traversal(tree, p, q, vocab, draw_verify_uniforms(tree, rng));
    const VerifyResult greedy = verify_greedy(tree, argmax);
    INFO("trial " << trial << ", " << tree.size() << " nodes");
    CHECK(traversal.accepted_nodes == greedy.accepted_nodes);
    CHECK(traversal.tokens == greedy.tokens);
    accepted += !greedy.accepted_nodes.empty();
  }
  CHECK(accepted > 100);
}

TEST_CASE("verify rule traversal: its name, the trees it takes, and refusals", "[verify]") {
  CHECK(parse_enum<VerifyRule>("traversal") == VerifyRule::kTraversal);
  CHECK(name_of(VerifyRule::kTraversal) == std::string("traversal"));
  const int vocab = 4;
  for (const SiblingDraw mode : kModes) {
    TokenTree tree(mode);
    tree.add_node(-1, 1);
    tree.add_node(-1, 2);
    tree.add_node(0, 3);
    CHECK(rule_takes(VerifyRule::kTraversal, tree));
    const std::vector<float> p(4 * vocab, 0.25f);
    const std::vector<double> u(verify_uniform_count(tree), 0.5);
    CHECK(verify_with(VerifyRule::kTraversal, tree, p, p, vocab, u).tokens ==
          verify_traversal(tree, p, p, vocab, u).tokens);
    if (mode == SiblingDraw::kTopK) {
      CHECK_NOTHROW(verify_traversal(tree, p, {}, vocab, u));  // top-k never reads q
    } else {
      CHECK_THROWS_WITH(verify_traversal(tree, p, {}, vocab, u),
                        Catch::Contains("verify_traversal: context 0 has sampled children but no q was given"));
    }
    CHECK_THROWS_WITH(verify_traversal(tree, std::span(p).first(8), p, vocab, u), Catch::Contains("p has 8 floats"));
    CHECK_THROWS_WITH(verify_traversal(tree, p, std::span(p).first(8), vocab, u), Catch::Contains("q has 8 floats"));
    CHECK_THROWS_WITH(verify_traversal(tree, p, p, vocab, std::span(u).first(3)),
                      Catch::Contains("3 uniforms given, the layout needs 7"));
    TokenTree outside = tree;
    outside.tokens[2] = vocab;
    CHECK_THROWS_WITH(verify_traversal(outside, p, p, vocab, u), Catch::Contains("node 2 has token 4 outside"));
    TokenTree forward = tree;
    forward.parent[1] = 2;
    CHECK_THROWS_WITH(verify_traversal(forward, p, p, vocab, u), Catch::Contains("node 1 has parent 2"));
  }
}

}  // namespace specula
