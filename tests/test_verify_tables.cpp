// Hand-computed tables for the verifiers on 4-token vocabularies (greedy; stochastic with
// fixed uniforms in every SiblingDraw mode), Residual's updates, the uniform layout and
// determinism, and the greedy / one-hot stochastic agreement on random trees.
#include <catch2/catch.hpp>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "verify/residual.h"
#include "verify/verifier.h"

namespace specula {
namespace {

using Ints = std::vector<int>;

// A tree from (parent, token) pairs, every context drawn with `mode`.
TokenTree make_tree(std::vector<std::pair<int, int>> nodes, SiblingDraw mode) {
  TokenTree tree(mode);
  for (auto [up, token] : nodes) tree.add_node(up, token);
  return tree;
}

// Rows [contexts, 4] from a list of rows.
std::vector<float> rows(std::vector<std::vector<float>> r) {
  std::vector<float> out;
  for (const auto& row : r) out.insert(out.end(), row.begin(), row.end());
  return out;
}

// Uniforms of the layout: acceptance tests of nodes, then one draw per context.
std::vector<double> layout(std::vector<double> node_tests, std::vector<double> context_draws) {
  node_tests.insert(node_tests.end(), context_draws.begin(), context_draws.end());
  return node_tests;
}

const std::vector<float> kP = {0.1f, 0.2f, 0.3f, 0.4f};
const std::vector<float> kQ = {0.4f, 0.3f, 0.2f, 0.1f};
const std::vector<float> kBonus = {0.5f, 0.25f, 0.25f, 0.0f};

}  // namespace

TEST_CASE("greedy verification: longest path agreeing with the argmax, then the argmax", "[verify]") {
  struct Case {
    const char* name;
    TokenTree tree;
    Ints argmax;  // per context
    Ints accepted, tokens;
  };
  const SiblingDraw s = SiblingDraw::kSampled;
  const std::vector<Case> cases = {
      {"chain, rejected at the third node", TokenTree::chain(Ints{2, 1, 3}, s), {2, 1, 0, 3}, {0, 1}, {2, 1, 0}},
      {"chain, fully accepted: bonus", TokenTree::chain(Ints{2, 1, 3}, s), {2, 1, 3, 1}, {0, 1, 2}, {2, 1, 3, 1}},
      {"chain, first node rejected", TokenTree::chain(Ints{2, 1}, s), {1, 1, 0}, {}, {1}},
      {"empty tree", TokenTree(s), {3}, {}, {3}},
      {"second branch matches", make_tree({{-1, 0}, {-1, 3}, {0, 1}, {1, 2}}, s), {3, 0, 2, 0, 1}, {1, 3}, {3, 2, 1}},
      {"duplicate siblings: the deeper path wins",
       make_tree({{-1, 1}, {-1, 1}, {1, 2}}, s),
       {1, 3, 2, 0},
       {1, 2},
       {1, 2, 0}},
      {"equal depth: the lower node index wins", make_tree({{-1, 1}, {-1, 1}}, s), {1, 3, 2}, {0}, {1, 3}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const VerifyResult r = verify_greedy(c.tree, c.argmax);
    CHECK(r.accepted_nodes == c.accepted);
    CHECK(r.tokens == c.tokens);
  }
}

TEST_CASE("stochastic chain: accept with p/q, else the normalised residual, bonus after the chain", "[verify]") {
  // p = (.1 .2 .3 .4), q = (.4 .3 .2 .1) at the root; residual max(p - q, 0) = (0 0 .1 .3)
  // normalised to (0 0 .25 .75). Context 1 (after the node) has p = (.5 .25 .25 0).
  const std::vector<float> p = rows({kP, kBonus}), q = rows({kQ, kQ});
  struct Case {
    int token;
    double u_accept, u_root, u_after;  // node test, draw at the root, draw after the node
    Ints tokens;
  };
  const std::vector<Case> cases = {
      {0, 0.20, 0.0, 0.60, {0, 1}},  // p/q = .25 > .20: accept; bonus .60 in (.5, .75] -> 1
      {0, 0.30, 0.20, 0.0, {2}},     // .30 >= .25: reject; residual draw .20 < .25 -> 2
      {0, 0.30, 0.30, 0.0, {3}},     // residual draw .30 >= .25 -> 3
      {3, 0.99, 0.0, 0.10, {3, 0}},  // p/q = 4: always accepted; bonus .10 < .5 -> 0
      {1, 0.60, 0.0, 0.0, {1, 0}},   // p/q = 2/3 > .60: accept; bonus 0 -> 0
      {1, 0.70, 0.30, 0.0, {3}},     // .70 >= 2/3: reject; residual draw .30 -> 3
  };
  for (const Case& c : cases) {
    INFO("token " << c.token << ", u " << c.u_accept);
    const TokenTree tree = TokenTree::chain(Ints{c.token}, SiblingDraw::kSampled);
    const VerifyResult r = verify_stochastic(tree, p, q, 4, layout({c.u_accept}, {c.u_root, c.u_after}));
    CHECK(r.tokens == c.tokens);
    CHECK(r.accepted_nodes.size() == c.tokens.size() - 1);
  }

  // Two nodes: the second is rejected at context 1 where p = (.5 .25 .25 0), q = (.4 .3 .2 .1):
  // node token 3 has p = 0: always rejected; residual (.1 0 .05 0) / .15 -> u .5 gives 0,
  // u .7 gives 2.
  const TokenTree two = TokenTree::chain(Ints{3, 3}, SiblingDraw::kSampled);
  const std::vector<float> p3 = rows({kP, kBonus, kP}), q3 = rows({kQ, kQ, kQ});
  CHECK(verify_stochastic(two, p3, q3, 4, layout({0.5, 0.0}, {0.0, 0.5, 0.0})).tokens == Ints{3, 0});
  CHECK(verify_stochastic(two, p3, q3, 4, layout({0.5, 0.0}, {0.0, 0.7, 0.0})).tokens == Ints{3, 2});
  CHECK(verify_stochastic(two, p3, q3, 4, layout({0.5, 0.0}, {0.0, 0.7, 0.0})).accepted_nodes == Ints{0});
}

TEST_CASE("stochastic tree, i.i.d. and without-replacement siblings: the residual and q updates", "[verify]") {
  // Root: p = (.5 .5 0 0), q = (.45 .25 .3 0); children tokens 2, 0, 1 (nodes 0, 1, 2).
  // Node 0 (token 2, p = 0) is always rejected: r1 = norm(max(p - q, 0)) = (1/6, 5/6, 0, 0).
  //   i.i.d.:      q2 = q:                     accept token 0 iff u < (1/6) / .45 = .3704
  //   w/o repl.:   q2 = (.45 .25 0 0) / .7:    accept token 0 iff u < (1/6) / (9/14) = .2593
  // On rejection r2 = (0 1 0 0) in both modes, so node 2 (token 1) is accepted.
  const std::vector<float> root_p = {0.5f, 0.5f, 0.0f, 0.0f}, root_q = {0.45f, 0.25f, 0.3f, 0.0f};
  const std::vector<float> p = rows({root_p, kP, kBonus, kP}), q = rows({root_q, kQ, kQ, kQ});
  const auto nodes = std::vector<std::pair<int, int>>{{-1, 2}, {-1, 0}, {-1, 1}};
  const TokenTree iid = make_tree(nodes, SiblingDraw::kSampled);
  const TokenTree wor = make_tree(nodes, SiblingDraw::kWithoutReplacement);
  // Bonus draws: context 2 (after node 1) has p = kBonus: u .6 -> 1; context 3 has kP: u .65 -> 3.
  auto uniforms = [](double u1) { return layout({0.0, u1, 0.5}, {0.0, 0.0, 0.6, 0.65}); };

  CHECK(verify_stochastic(iid, p, q, 4, uniforms(0.30)).tokens == Ints{0, 1});
  CHECK(verify_stochastic(iid, p, q, 4, uniforms(0.30)).accepted_nodes == Ints{1});
  CHECK(verify_stochastic(iid, p, q, 4, uniforms(0.40)).tokens == Ints{1, 3});
  CHECK(verify_stochastic(iid, p, q, 4, uniforms(0.40)).accepted_nodes == Ints{2});
  CHECK(verify_stochastic(wor, p, q, 4, uniforms(0.25)).tokens == Ints{0, 1});
  CHECK(verify_stochastic(wor, p, q, 4, uniforms(0.30)).tokens == Ints{1, 3});

  // Without node 2, a rejection of both ends in a draw from r2 = (0 1 0 0): token 1.
  const TokenTree two = make_tree({{-1, 2}, {-1, 0}}, SiblingDraw::kWithoutReplacement);
  const std::vector<float> p2 = rows({root_p, kP, kBonus}), q2 = rows({root_q, kQ, kQ});
  CHECK(verify_stochastic(two, p2, q2, 4, layout({0.0, 0.3}, {0.99, 0.0, 0.0})).tokens == Ints{1});

  // A duplicate i.i.d. sibling after a rejection of the same token has residual 0: rejected.
  // Root children 0, 0 under p = kP, q = kQ: r1 = (0 0 .25 .75); the second 0 is rejected,
  // r2 = norm(max(r1 - q, 0)) = (0 0 .05 .65) / .7; u .5 -> 3, u .05 -> 2.
  const TokenTree dup = make_tree({{-1, 0}, {-1, 0}}, SiblingDraw::kSampled);
  const std::vector<float> pd = rows({kP, kP, kP}), qd = rows({kQ, kQ, kQ});
  CHECK(verify_stochastic(dup, pd, qd, 4, layout({0.5, 0.0}, {0.5, 0.0, 0.0})).tokens == Ints{3});
  CHECK(verify_stochastic(dup, pd, qd, 4, layout({0.5, 0.0}, {0.05, 0.0, 0.0})).tokens == Ints{2});
}

TEST_CASE("stochastic tree, top-k siblings: point-mass proposals, q never read", "[verify]") {
  // Root p = (.1 .2 .3 .4), children 3 then 2. Accept 3 iff u < .4; else accept 2 iff
  // u < .3 / .6 = .5; else draw from (.1 .2 0 0) / .3: u .2 -> 0, u .5 -> 1.
  const TokenTree tree = make_tree({{-1, 3}, {-1, 2}}, SiblingDraw::kTopK);
  const std::vector<float> p = rows({kP, kBonus, kBonus});
  const std::vector<float> no_q;
  CHECK(verify_stochastic(tree, p, no_q, 4, layout({0.39, 0.0}, {0.0, 0.1, 0.0})).tokens == Ints{3, 0});
  CHECK(verify_stochastic(tree, p, no_q, 4, layout({0.41, 0.49}, {0.0, 0.0, 0.6})).tokens == Ints{2, 1});
  CHECK(verify_stochastic(tree, p, no_q, 4, layout({0.41, 0.51}, {0.2, 0.0, 0.0})).tokens == Ints{0});
  CHECK(verify_stochastic(tree, p, no_q, 4, layout({0.41, 0.51}, {0.5, 0.0, 0.0})).tokens == Ints{1});
  // Sampled children need q.
  const TokenTree sampled = make_tree({{-1, 3}}, SiblingDraw::kSampled);
  CHECK_THROWS_AS(verify_stochastic(sampled, rows({kP, kP}), no_q, 4, layout({0.0}, {0.0, 0.0})), SpeculaError);
}

TEST_CASE("Residual: removal, max(r - q, 0) update and inverse-CDF sampling", "[verify]") {
  Residual r(kP);
  CHECK(r.sample(0.0) == 0);
  CHECK(r.sample(0.35) == 2);  // .35 in (.3, .6]
  CHECK(r.sample(0.999999) == 3);
  r.remove(2);
  r.remove(2);
  CHECK(r.mass() == Approx(0.7));
  CHECK(r.weight(2) == 0.0);
  CHECK(r.sample(0.35) == 1);  // .35 * .7 = .245 in (.1, .3]
  CHECK(r.sample(0.5) == 3);   // .35 in (.3, .7]
  Residual q(kQ);
  r.subtract(q);  // max((.1 .2 0 .4) / .7 - (.4 .3 .2 .1), 0) = (0 0 0 .4714)
  CHECK(r.weight(0) == 0.0);
  CHECK(r.weight(3) == Approx(0.4 / 0.7 - 0.1));
  CHECK(r.mass() == Approx(0.4 / 0.7 - 0.1));
  CHECK(r.sample(0.0) == 3);
  r.remove(3);
  CHECK(r.sample(0.5) == -1);
}

TEST_CASE("verifier uniforms: fixed layout, one Philox stream, bitwise determinism", "[verify]") {
  const TokenTree tree = make_tree({{-1, 1}, {-1, 2}, {0, 3}, {1, 0}, {2, 1}}, SiblingDraw::kSampled);
  CHECK(verify_uniform_count(tree) == 11);
  Philox a(7, 3), b(7, 3);
  const std::vector<double> ua = draw_verify_uniforms(tree, a), ub = draw_verify_uniforms(tree, b);
  CHECK(ua == ub);
  CHECK(a.draws() == 11);
  Philox c(7, 3);
  for (double u : ua) CHECK(u == c.uniform());

  // Random rows: repeated runs give identical results; entries off the visited path are unread.
  Philox rng(99);
  std::vector<float> p, q;
  for (int i = 0; i < 6 * 4; ++i) {
    p.push_back(float(rng.uniform()));
    q.push_back(float(rng.uniform()));
  }
  for (int c0 = 0; c0 < 6; ++c0) {
    float sp = 0, sq = 0;
    for (int v = 0; v < 4; ++v) sp += p[c0 * 4 + v], sq += q[c0 * 4 + v];
    for (int v = 0; v < 4; ++v) p[c0 * 4 + v] /= sp, q[c0 * 4 + v] /= sq;
  }
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<double> u = draw_verify_uniforms(tree, rng);
    const VerifyResult r1 = verify_stochastic(tree, p, q, 4, u), r2 = verify_stochastic(tree, p, q, 4, u);
    CHECK(r1.tokens == r2.tokens);
    CHECK(r1.accepted_nodes == r2.accepted_nodes);
    // Nodes tried: the children of the contexts on the path; draw: the final context only.
    std::vector<bool> read(u.size(), false);
    int context = 0;
    for (std::size_t k = 0; k <= r1.accepted_nodes.size(); ++k) {
      for (int child : tree.children(context)) {
        read[child] = true;
        if (k < r1.accepted_nodes.size() && child == r1.accepted_nodes[k]) break;
      }
      if (k < r1.accepted_nodes.size()) context = r1.accepted_nodes[k] + 1;
    }
    read[tree.size() + context] = true;
    std::vector<double> scrambled = u;
    for (std::size_t i = 0; i < u.size(); ++i)
      if (!read[i]) scrambled[i] = 1.0 - u[i];
    CHECK(verify_stochastic(tree, p, q, 4, scrambled).tokens == r1.tokens);
  }
}

TEST_CASE("stochastic verification with one-hot target rows equals greedy verification", "[verify]") {
  // On random trees with distinct siblings (greedy picks the deepest of duplicate paths,
  // multi-step sampling the first), in every mode, with random q rows.
  const int vocab = 5;
  Philox rng(2025);
  for (int trial = 0; trial < 200; ++trial) {
    const SiblingDraw mode = static_cast<SiblingDraw>(trial % 3);
    TokenTree tree(mode);
    const int n = 1 + static_cast<int>(rng.uniform() * 12);
    for (int i = 0; i < n; ++i) {
      const int up = static_cast<int>(rng.uniform() * (tree.size() + 1)) - 1;
      const int token = static_cast<int>(rng.uniform() * vocab);
      bool taken = false;
      for (int sib : tree.children(up + 1)) taken = taken || tree.tokens[sib] == token;
      if (!taken) tree.add_node(up, token);
    }
    tree.validate(vocab);
    std::vector<int> argmax;
    std::vector<float> p, q;
    for (int c = 0; c < tree.num_contexts(); ++c) {
      argmax.push_back(static_cast<int>(rng.uniform() * vocab));
      // Bias the argmax towards the first child so that paths get accepted.
      const int first = tree.first_child(c);
      if (first >= 0 && rng.uniform() < 0.7) argmax.back() = tree.tokens[first];
      float sum = 0;
      std::vector<float> row(vocab);
      for (float& w : row) sum += w = float(rng.uniform());
      for (int v = 0; v < vocab; ++v) {
        p.push_back(v == argmax.back() ? 1.0f : 0.0f);
        q.push_back(row[v] / sum);
      }
    }
    const std::vector<double> u = draw_verify_uniforms(tree, rng);
    const VerifyResult greedy = verify_greedy(tree, argmax), stochastic = verify_stochastic(tree, p, q, vocab, u);
    INFO("trial " << trial);
    CHECK(stochastic.tokens == greedy.tokens);
    CHECK(stochastic.accepted_nodes == greedy.accepted_nodes);
  }
}

TEST_CASE("verifiers reject inputs of the wrong shape", "[verify]") {
  const TokenTree tree = TokenTree::chain(Ints{1, 2}, SiblingDraw::kSampled);
  const std::vector<float> p = rows({kP, kP, kP});
  CHECK_THROWS_AS(verify_greedy(tree, Ints{1, 2}), SpeculaError);
  CHECK_THROWS_AS(verify_stochastic(tree, p, p, 4, layout({0.0, 0.0}, {0.0, 0.0})), SpeculaError);
  CHECK_THROWS_AS(verify_stochastic(tree, rows({kP, kP}), p, 4, layout({0.0, 0.0}, {0.0, 0.0, 0.0})), SpeculaError);
  const TokenTree outside = TokenTree::chain(Ints{7}, SiblingDraw::kSampled);
  CHECK_THROWS_AS(verify_stochastic(outside, rows({kP, kP}), rows({kQ, kQ}), 4, layout({0.0}, {0.0, 0.0})),
                  SpeculaError);
}

}  // namespace specula
