// The tree-verification kernels (engine/cuda/verify_tree.cu) against verify_greedy and
// verify_stochastic, verify_block on half of the chains and verify_traversal on a third of the
// other trees ([gpu]: on a GPU, and on the host execution in CI): random trees of every
// shape (empty, chains, static trees, bushes, random topologies) and draw mode (each of the
// three, and mixed per context; duplicate siblings under kSampled), random p, q and uniforms
// (zeros, ties, one-hot rows, subnormal entries, vocabularies of 2-512; uniforms at and beside
// the boundaries of the first acceptance test and of p's CDF, and in half of the trees one
// uniform the CPU reads moved to the double where its verdict changes), verified in batches of
// many sequences per launch: counts, accepted nodes and tokens must be identical. In a fifth of
// the trees not verified by block, the last children of some contexts are absent (token
// kAbsentDraw, and all under them): the CPU verifies the tree of the present nodes, each with
// its uniform and its context's rows.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

#include "engine/cuda/device.h"
#include "engine/cuda/kernel_harness.h"
#include "engine/cuda/verify_tree.h"
#include "tests/test_gpu_support.h"
#include "tests/test_support.h"
#include "verify/token_tree.h"
#include "verify/verify_rule.h"
#include "verify/verifier.h"

namespace specula {
namespace {

static_assert(kDrawSampled == static_cast<int>(SiblingDraw::kSampled));
static_assert(kDrawWithoutReplacement == static_cast<int>(SiblingDraw::kWithoutReplacement));
static_assert(kDrawTopK == static_cast<int>(SiblingDraw::kTopK));

using Rng = std::mt19937_64;

int uniform_int(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
double uniform01(Rng& rng) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); }
bool coin(Rng& rng, double p) { return uniform01(rng) < p; }

// A probability row of one of several kinds, as float (sums to 1 up to rounding, some mass).
std::vector<float> random_row(Rng& rng, int vocab) {
  std::vector<double> w(vocab, 0.0);
  switch (uniform_int(rng, 0, 5)) {
    case 0:  // one-hot
      w[uniform_int(rng, 0, vocab - 1)] = 1.0;
      break;
    case 1:  // uniform: every entry tied
      std::fill(w.begin(), w.end(), 1.0);
      break;
    case 2:  // a few distinct levels: ties among many entries
      for (double& x : w) x = uniform_int(rng, 0, 3);
      break;
    case 3:  // sparse: most entries zero
      for (double& x : w) x = coin(rng, 0.2) ? std::exponential_distribution<double>(1.0)(rng) : 0.0;
      break;
    case 4:  // peaked: exponentials cubed
      for (double& x : w) x = std::pow(std::exponential_distribution<double>(1.0)(rng), 3.0);
      break;
    default:
      for (double& x : w) x = std::exponential_distribution<double>(1.0)(rng);
  }
  double sum = std::accumulate(w.begin(), w.end(), 0.0);
  if (sum <= 0.0) w[uniform_int(rng, 0, vocab - 1)] = sum = 1.0;
  std::vector<float> row(vocab);
  for (int v = 0; v < vocab; ++v) row[v] = static_cast<float>(w[v] / sum);
  // Sometimes subnormal entries (a device flushing them to zero would differ).
  if (coin(rng, 0.1))
    for (int k = uniform_int(rng, 1, 3); k > 0; --k)
      row[uniform_int(rng, 0, vocab - 1)] = std::numeric_limits<float>::denorm_min() * uniform_int(rng, 1, 1000);
  return row;
}

// A token drawn from `row` (inverse CDF in double) or uniformly.
int token_from(Rng& rng, std::span<const float> row) {
  if (coin(rng, 0.3)) return uniform_int(rng, 0, static_cast<int>(row.size()) - 1);
  const double u = uniform01(rng) * std::accumulate(row.begin(), row.end(), 0.0);
  double c = 0.0;
  for (std::size_t v = 0; v < row.size(); ++v)
    if ((c += row[v]) > u && row[v] > 0) return static_cast<int>(v);
  return static_cast<int>(row.size()) - 1;
}

// What the kernels get where some nodes are absent: the whole tree, absent nodes' tokens
// kAbsentDraw, with every context's rows and argmax and the whole uniform layout.
struct Padded {
  std::vector<int> tokens, parent, draw, argmax;
  std::vector<float> p, q;
  std::vector<double> uniforms;
  std::vector<int> kept;  // [present nodes] each present node's index here
};

// One sequence: its tree, p, q, uniforms and greedy argmax (the CPU's view: the present nodes
// alone where `padded` gives the kernels more).
struct Case {
  TokenTree tree;
  int vocab = 0;
  std::vector<float> p, q;
  std::vector<double> uniforms;
  std::vector<int> argmax;
  std::string shape;
  VerifyRule rule = VerifyRule::kToken;  // of the stochastic verification
  std::optional<Padded> padded;
};

// What the CPU's stochastic verification of `c` emits.
VerifyResult cpu_stochastic(const Case& c) { return verify_with(c.rule, c.tree, c.p, c.q, c.vocab, c.uniforms); }

// Parents of a tree of one of the shapes (nodes in topological order).
std::vector<int> random_parents(Rng& rng, std::string& shape) {
  std::vector<int> parent;
  switch (uniform_int(rng, 0, 5)) {
    case 0:
      shape = "empty";
      break;
    case 1: {
      shape = "chain";
      const int n = uniform_int(rng, 1, 10);
      for (int i = 0; i < n; ++i) parent.push_back(i - 1);
      break;
    }
    case 2: {  // static tree: every node of depth d has branching[d] children, level by level
      shape = "static";
      std::vector<int> level = {-1};
      const int depth = uniform_int(rng, 1, 4);
      for (int d = 0; d < depth && parent.size() < 48; ++d) {
        const int branching = uniform_int(rng, 1, 4);
        std::vector<int> next;
        for (int up : level)
          for (int b = 0; b < branching; ++b) {
            parent.push_back(up);
            next.push_back(static_cast<int>(parent.size()) - 1);
          }
        level = next;
      }
      break;
    }
    case 3: {  // bush: the root's children only
      shape = "bush";
      const int n = uniform_int(rng, 1, 12);
      for (int i = 0; i < n; ++i) parent.push_back(-1);
      break;
    }
    default: {
      shape = "random";
      const int n = uniform_int(rng, 1, 40);
      for (int i = 0; i < n; ++i)
        parent.push_back(coin(rng, 0.5) && i > 0 ? i - 1 : uniform_int(rng, -1, i - 1));
    }
  }
  return parent;
}

// Moves one uniform that the case's rule reads (the token rule: an acceptance test along its
// walk; block: a stop test from the leaf down to the kept length; traversal: any node's test;
// each: the final draw) to one side of the point where the CPU's verdict changes, found by bisection
// over the doubles in [0, 1): a kernel whose arithmetic differs from the CPU's by one
// rounding there gives another verdict.
void place_on_boundary(Rng& rng, Case& c) {
  const int n = c.tree.size();
  auto verdict_at = [&](int k, double u) {
    c.uniforms[k] = u;
    return cpu_stochastic(c);
  };
  const VerifyResult now = cpu_stochastic(c);
  // The uniforms read: each visited context's children up to the accepted one, then the draw
  // (block: the stop tests of depths n down to the kept length, then the draw).
  std::vector<int> read;
  int context = 0;
  if (c.rule == VerifyRule::kBlock) {
    context = static_cast<int>(now.accepted_nodes.size());
    for (int i = std::max(context, 1); i <= n; ++i) read.push_back(i - 1);
  } else if (c.rule == VerifyRule::kTraversal) {
    context = now.accepted_nodes.empty() ? 0 : now.accepted_nodes.back() + 1;
    for (int i = 0; i < n; ++i) read.push_back(i);
  }
  for (std::size_t d = 0; c.rule == VerifyRule::kToken; ++d) {
    const int accepted = d < now.accepted_nodes.size() ? now.accepted_nodes[d] : -1;
    for (int child = c.tree.first_child(context); child >= 0; child = c.tree.next_sibling(child)) {
      read.push_back(child);
      if (child == accepted) break;
    }
    if (accepted < 0) break;
    context = accepted + 1;
  }
  read.push_back(n + context);
  const int k = read[uniform_int(rng, 0, static_cast<int>(read.size()) - 1)];
  const double saved = c.uniforms[k];
  std::uint64_t lo = std::bit_cast<std::uint64_t>(0.0), hi = std::bit_cast<std::uint64_t>(std::nextafter(1.0, 0.0));
  const VerifyResult at_lo = verdict_at(k, 0.0);
  auto same = [&](const VerifyResult& r) { return r.tokens == at_lo.tokens && r.accepted_nodes == at_lo.accepted_nodes; };
  if (same(verdict_at(k, std::bit_cast<double>(hi)))) {
    c.uniforms[k] = saved;
    return;
  }
  // Positive doubles order as their bits: bisect to adjacent doubles with different verdicts.
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (same(verdict_at(k, std::bit_cast<double>(mid))))
      lo = mid;
    else
      hi = mid;
  }
  c.uniforms[k] = std::bit_cast<double>(coin(rng, 0.5) ? lo : hi);
}

// Makes the last children of some contexts absent (a draft whose distribution ran out), and
// all under them: the kernels get the whole tree, the CPU the tree of the present nodes with
// their contexts' rows, argmax and uniforms.
void make_absent(Rng& rng, Case& c) {
  const TokenTree& whole = c.tree;
  const int n = whole.size();
  const std::size_t v = static_cast<std::size_t>(c.vocab);
  std::vector<bool> absent(static_cast<std::size_t>(n), false);
  for (int ctx = 0; ctx <= n; ++ctx) {
    const std::vector<int> kids = whole.children(ctx);
    if (kids.empty() || !coin(rng, 0.4)) continue;
    for (std::size_t k = static_cast<std::size_t>(uniform_int(rng, 0, static_cast<int>(kids.size()) - 1)); k < kids.size(); ++k)
      absent[static_cast<std::size_t>(kids[k])] = true;
  }
  for (int i = 0; i < n; ++i)
    if (whole.parent[i] >= 0 && absent[static_cast<std::size_t>(whole.parent[i])]) absent[static_cast<std::size_t>(i)] = true;
  Padded padded{whole.tokens, whole.parent, {}, c.argmax, c.p, c.q, c.uniforms, {}};
  for (SiblingDraw d : whole.draw) padded.draw.push_back(static_cast<int>(d));
  std::vector<int> compact(static_cast<std::size_t>(n), -1);
  TokenTree tree(whole.draw[0]);
  std::vector<int> contexts{0};  // the whole tree's context of each compact context
  for (int i = 0; i < n; ++i) {
    if (absent[static_cast<std::size_t>(i)]) {
      padded.tokens[static_cast<std::size_t>(i)] = kAbsentDraw;
      continue;
    }
    const int parent = whole.parent[static_cast<std::size_t>(i)];
    compact[static_cast<std::size_t>(i)] = tree.add_node(parent < 0 ? -1 : compact[static_cast<std::size_t>(parent)],
                                                         whole.tokens[static_cast<std::size_t>(i)]);
    padded.kept.push_back(i);
    contexts.push_back(i + 1);
  }
  if (padded.kept.size() == static_cast<std::size_t>(n)) return;
  Case out = c;
  out.tree = tree;
  out.p.clear();
  out.q.clear();
  out.argmax.clear();
  for (std::size_t k = 0; k < contexts.size(); ++k) {
    const std::size_t ctx = static_cast<std::size_t>(contexts[k]);
    out.tree.draw[k] = whole.draw[ctx];
    out.p.insert(out.p.end(), c.p.begin() + static_cast<std::ptrdiff_t>(ctx * v), c.p.begin() + static_cast<std::ptrdiff_t>((ctx + 1) * v));
    out.q.insert(out.q.end(), c.q.begin() + static_cast<std::ptrdiff_t>(ctx * v), c.q.begin() + static_cast<std::ptrdiff_t>((ctx + 1) * v));
    out.argmax.push_back(c.argmax[ctx]);
  }
  out.uniforms.clear();
  for (const int i : padded.kept) out.uniforms.push_back(c.uniforms[static_cast<std::size_t>(i)]);
  for (const int ctx : contexts) out.uniforms.push_back(c.uniforms[static_cast<std::size_t>(n + ctx)]);
  out.shape += ", " + std::to_string(n - tree.size()) + " absent";
  out.padded = std::move(padded);
  c = std::move(out);
}

Case random_case(Rng& rng) {
  static constexpr int kVocabs[] = {2, 3, 4, 5, 8, 8, 16, 64, 64, 128, 512};
  Case c;
  c.vocab = kVocabs[uniform_int(rng, 0, static_cast<int>(std::size(kVocabs)) - 1)];
  const std::vector<int> parent = random_parents(rng, c.shape);
  const int n = static_cast<int>(parent.size());
  const int contexts = n + 1;
  // Draw modes: one for the whole tree, or one per context.
  const int mode_kind = uniform_int(rng, 0, 3);
  std::vector<SiblingDraw> draw(contexts);
  for (SiblingDraw& d : draw) d = static_cast<SiblingDraw>(mode_kind < 3 ? mode_kind : uniform_int(rng, 0, 2));
  c.shape += mode_kind < 3 ? " mode " + std::to_string(mode_kind) : " mixed";
  // Rows: q sometimes equal to p (every proposal accepted up to rounding).
  const bool q_is_p = coin(rng, 0.1);
  for (int ctx = 0; ctx < contexts; ++ctx) {
    const std::vector<float> p = random_row(rng, c.vocab);
    const std::vector<float> q = q_is_p ? p : random_row(rng, c.vocab);
    c.p.insert(c.p.end(), p.begin(), p.end());
    c.q.insert(c.q.end(), q.begin(), q.end());
  }
  auto row = [&](const std::vector<float>& m, int ctx) {
    return std::span<const float>(m).subspan(static_cast<std::size_t>(ctx) * c.vocab, c.vocab);
  };
  // Tokens: kSampled children from q or uniform (duplicates possible, and forced sometimes);
  // kWithoutReplacement / kTopK children distinct (a context with more children than the
  // vocabulary has is drawn kSampled).
  std::vector<std::vector<int>> children(contexts);
  for (int i = 0; i < n; ++i) children[parent[i] + 1].push_back(i);
  std::vector<int> tokens(n);
  for (int ctx = 0; ctx < contexts; ++ctx) {
    if (static_cast<int>(children[ctx].size()) > c.vocab) draw[ctx] = SiblingDraw::kSampled;
    std::vector<int> used;
    for (int i : children[ctx]) {
      int x;
      if (draw[ctx] == SiblingDraw::kSampled) {
        x = !used.empty() && coin(rng, 0.15) ? used[uniform_int(rng, 0, static_cast<int>(used.size()) - 1)]
                                             : token_from(rng, coin(rng, 0.5) ? row(c.q, ctx) : row(c.p, ctx));
      } else {
        x = token_from(rng, coin(rng, 0.5) ? row(c.q, ctx) : row(c.p, ctx));
        while (std::find(used.begin(), used.end(), x) != used.end()) x = (x + 1) % c.vocab;
      }
      used.push_back(x);
      tokens[i] = x;
    }
  }
  c.tree = TokenTree(draw[0]);
  for (int i = 0; i < n; ++i) c.tree.add_node(parent[i], tokens[i]);
  c.tree.draw = draw;
  c.tree.validate(c.vocab);
  // Half of the chains (empty trees included) verified by the block rule, a third of the other
  // trees by traversal.
  if (rule_takes(VerifyRule::kBlock, c.tree) ? coin(rng, 0.5) : coin(rng, 1.0 / 3)) {
    c.rule = rule_takes(VerifyRule::kBlock, c.tree) ? VerifyRule::kBlock : VerifyRule::kTraversal;
    c.shape += std::string(" ") + name_of(c.rule);
  }
  // Uniforms: random, or 0, or at / beside a boundary: the first acceptance test of a node
  // (p(x) / q(x), r = p and q_1 = q), the residual's CDF at a random token (prefix sums of p
  // over its lane_sum-order total).
  c.uniforms.resize(verify_uniform_count(c.tree));
  for (int k = 0; k < static_cast<int>(c.uniforms.size()); ++k) {
    double u = uniform01(rng);
    const int kind = uniform_int(rng, 0, 9);
    if (kind == 0) {
      u = 0.0;
    } else if (kind <= 3 && k < n) {
      const int ctx = parent[k] + 1;
      const double px = row(c.p, ctx)[tokens[k]], qx = row(c.q, ctx)[tokens[k]];
      const double qx_used = draw[ctx] == SiblingDraw::kTopK ? 1.0 : qx;
      if (qx_used > 0 && px < qx_used) u = px / qx_used;
    } else if (kind <= 3) {
      const std::span<const float> p = row(c.p, k - n);
      double total = 0.0, prefix = 0.0;
      for (float w : p) total += w;
      const int upto = uniform_int(rng, 0, c.vocab - 1);
      for (int v = 0; v <= upto; ++v) prefix += p[v];
      if (total > 0 && prefix < total) u = prefix / total;
    }
    if (kind == 2) u = std::nextafter(u, 0.0);
    if (kind == 3) u = std::nextafter(u, 1.0);
    c.uniforms[k] = std::clamp(u, 0.0, std::nextafter(1.0, 0.0));
  }
  if (coin(rng, 0.5)) place_on_boundary(rng, c);
  // Greedy argmax: often a child's token, so that paths agree deep.
  c.argmax.resize(contexts);
  for (int ctx = 0; ctx < contexts; ++ctx)
    c.argmax[ctx] = !children[ctx].empty() && coin(rng, 0.7)
                        ? tokens[children[ctx][uniform_int(rng, 0, static_cast<int>(children[ctx].size()) - 1)]]
                        : uniform_int(rng, 0, c.vocab - 1);
  // A fifth of the trees the block rule does not verify lose nodes to absence.
  if (c.rule != VerifyRule::kBlock && n > 0 && coin(rng, 0.2)) make_absent(rng, c);
  return c;
}

// The cases' flat batch for the kernels; every case has the batch's vocabulary.
cuda::harness::TreeBatch flatten(const std::vector<Case>& cases, int vocab) {
  cuda::harness::TreeBatch b;
  b.vocab = vocab;
  b.node_indptr.push_back(0);
  const auto append = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
  for (const Case& c : cases) {
    if (c.padded) {
      const Padded& w = *c.padded;
      append(b.tokens, w.tokens);
      append(b.parent, w.parent);
      append(b.draw, w.draw);
      append(b.argmax, w.argmax);
      append(b.p, w.p);
      append(b.q, w.q);
      append(b.uniforms, w.uniforms);
    } else {
      append(b.tokens, c.tree.tokens);
      append(b.parent, c.tree.parent);
      for (SiblingDraw d : c.tree.draw) b.draw.push_back(static_cast<int>(d));
      append(b.argmax, c.argmax);
      append(b.p, c.p);
      append(b.q, c.q);
      append(b.uniforms, c.uniforms);
    }
    b.node_indptr.push_back(static_cast<int>(b.tokens.size()));
    b.rule.push_back(static_cast<int>(c.rule));
  }
  return b;
}

// Sequence s's verdict out of the kernels' arrays.
VerifyResult verdict(const cuda::harness::TreeVerdicts& out, const cuda::harness::TreeBatch& b, int s) {
  VerifyResult r;
  const int first = b.node_indptr[s], count = out.accepted_count[s];
  if (count < 0 || count > b.node_indptr[s + 1] - first) return {{-2}, {-2}};
  r.accepted_nodes.assign(out.accepted_nodes.begin() + first, out.accepted_nodes.begin() + first + count);
  const int ctx = cuda::context_offset(s, first);
  r.tokens.assign(out.tokens.begin() + ctx, out.tokens.begin() + ctx + count + 1);
  return r;
}

std::string describe(const Case& c, const VerifyResult& cpu, const VerifyResult& gpu) {
  std::ostringstream s;
  s << c.shape << ", vocab " << c.vocab << ", " << c.tree.size() << " nodes; parents";
  for (int x : c.tree.parent) s << ' ' << x;
  s << "; tokens";
  for (int x : c.tree.tokens) s << ' ' << x;
  s << "; cpu nodes";
  for (int x : cpu.accepted_nodes) s << ' ' << x;
  s << " tokens";
  for (int x : cpu.tokens) s << ' ' << x;
  s << "; kernel nodes";
  for (int x : gpu.accepted_nodes) s << ' ' << x;
  s << " tokens";
  for (int x : gpu.tokens) s << ' ' << x;
  return s.str();
}

}  // namespace

TEST_CASE("cuda kernels: tree verification emits exactly what verify_greedy and verify_stochastic emit", "[gpu]") {
  REQUIRE_GPU();
  // 10^5 trees (10^4 under the sanitizers), in launches of 1000 sequences of one vocabulary.
  const int total = test::kSanitized ? 10'000 : 100'000;
  constexpr int kPerLaunch = 1000;
  Rng rng(38);
  const auto start = std::chrono::steady_clock::now();
  int trees = 0, mismatches = 0, deep = 0, corrected = 0, empty = 0, block = 0, block_deep = 0, traversal = 0,
      traversal_deep = 0;
  int kernel_launches = 0, with_absent = 0, absent_deep = 0;
  std::map<int, std::vector<Case>> pending;  // by vocabulary
  auto run = [&](std::vector<Case>& cases) {
    if (cases.empty()) return;
    const cuda::harness::TreeBatch batch = flatten(cases, cases[0].vocab);
    for (const bool greedy : {true, false}) {
      const cuda::harness::TreeVerdicts out = cuda::harness::verify_tree(batch, greedy);
      ++kernel_launches;
      for (std::size_t s = 0; s < cases.size(); ++s) {
        const Case& c = cases[s];
        VerifyResult cpu = greedy ? verify_greedy(c.tree, c.argmax) : cpu_stochastic(c);
        if (c.padded)  // the kernels number the nodes of the whole tree
          for (int& node : cpu.accepted_nodes) node = c.padded->kept[static_cast<std::size_t>(node)];
        const VerifyResult gpu = verdict(out, batch, static_cast<int>(s));
        if (cpu.accepted_nodes != gpu.accepted_nodes || cpu.tokens != gpu.tokens) {
          if (++mismatches <= 5) {
            INFO((greedy ? "greedy: " : "stochastic: ") << describe(c, cpu, gpu));
            CHECK(false);
          }
        }
        if (!greedy) {
          with_absent += c.padded.has_value();
          absent_deep += c.padded.has_value() && cpu.accepted_nodes.size() >= 2;
          deep += cpu.accepted_nodes.size() >= 2;
          empty += c.tree.size() == 0;
          corrected += c.tree.size() > 0 && cpu.accepted_nodes.empty();
          block += c.rule == VerifyRule::kBlock;
          block_deep += c.rule == VerifyRule::kBlock && cpu.accepted_nodes.size() >= 2;
          traversal += c.rule == VerifyRule::kTraversal;
          traversal_deep += c.rule == VerifyRule::kTraversal && cpu.accepted_nodes.size() >= 2;
        }
      }
    }
    trees += static_cast<int>(cases.size());
    cases.clear();
  };
  for (int i = 0; i < total; ++i) {
    Case c = random_case(rng);
    std::vector<Case>& bucket = pending[c.vocab];
    bucket.push_back(std::move(c));
    if (static_cast<int>(bucket.size()) == kPerLaunch) run(bucket);
  }
  for (auto& [vocab, cases] : pending) run(cases);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("tree verification: " << trees << " trees, " << kernel_launches << " launches, " << mismatches
                             << " mismatches; " << deep << " accepted 2+ nodes, " << corrected
                             << " rejected every root child, " << empty << " empty, " << block << " block-verified ("
                             << block_deep << " kept 2+), " << traversal << " by traversal (" << traversal_deep
                             << " kept 2+), " << with_absent << " with absent nodes (" << absent_deep
                             << " kept 2+); " << seconds << " s"
                             << (test::host_execution() ? " (host execution)" : ""));
  CHECK(trees == total);
  CHECK(mismatches == 0);
  // The sweep reaches deep acceptances, full rejections and empty trees.
  CHECK(deep > total / 20);
  CHECK(corrected > total / 20);
  CHECK(empty > total / 20);
  CHECK(block > total / 20);
  CHECK(block_deep > total / 100);
  CHECK(traversal > total / 20);
  CHECK(traversal_deep > total / 100);
  CHECK(with_absent > total / 20);
  CHECK(absent_deep > total / 100);
}

}  // namespace specula
