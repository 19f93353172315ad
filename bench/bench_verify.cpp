// Time per verification call at vocab 4096: chains of 4 and 8 drafted tokens and trees of
// 16 (branching 4,3) and 64 (4,3,4) nodes; greedy, and stochastic in each SiblingDraw mode.
// Rows are softmaxes of random peaked logits, the draft's logits being the target's plus
// noise (so most first children are accepted and some are rejected); each iteration takes the
// next of 4 drafted instances and 256 uniform sets, so the figure averages over
// accept/reject patterns. Counter `tokens` = emitted tokens per call (accepted + 1).
// Greedy times the path search alone (target_argmax given); stochastic includes the
// residual updates and the final inverse-CDF draw over the vocabulary.
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>
#include <vector>

#include "draft/sibling_draw.h"
#include "base/rng.h"
#include "verify/verifier.h"

namespace specula {
namespace {

constexpr int kVocab = 4096;

struct Shape {
  const char* name;
  std::vector<int> branching;
};
const std::vector<Shape> kShapes = {
    {"chain4", {1, 1, 1, 1}}, {"chain8", {1, 1, 1, 1, 1, 1, 1, 1}}, {"tree16", {4, 3}}, {"tree64", {4, 3, 4}}};

struct Instance {
  TokenTree tree;
  std::vector<float> p, q;  // [n + 1, kVocab]
  std::vector<int> argmax;  // [n + 1]
};

void softmax_row(const std::vector<double>& logits, std::vector<float>& out) {
  double max = logits[0], sum = 0.0;
  for (double l : logits) max = std::max(max, l);
  for (double l : logits) sum += std::exp(l - max);
  for (double l : logits) out.push_back(float(std::exp(l - max) / sum));
}

// Target logits: noise of standard deviation 1 plus a peak of 9 on one random token (top
// probability ~0.58 at vocab 4096); draft logits: target plus noise in [-1, 1] (per-token
// acceptance sum min(p, q) ~0.84).
void add_context(Instance& in, Philox& rng) {
  std::vector<double> target(kVocab), draft(kVocab);
  for (int v = 0; v < kVocab; ++v) {
    target[v] = 2.0 * (rng.uniform() + rng.uniform() + rng.uniform() - 1.5);
    draft[v] = target[v] + 2.0 * (rng.uniform() - 0.5);
  }
  const int peak = static_cast<int>(rng.uniform() * kVocab);
  target[peak] += 9.0;
  draft[peak] += 9.0;
  softmax_row(target, in.p);
  softmax_row(draft, in.q);
  int best = 0;
  for (int v = 1; v < kVocab; ++v)
    if (target[v] > target[best]) best = v;
  in.argmax.push_back(best);
}

Instance make_instance(const Shape& shape, SiblingDraw mode, Philox& rng) {
  Instance in{TokenTree(mode), {}, {}, {}};
  add_context(in, rng);  // root
  std::vector<int> frontier{-1};
  for (int k : shape.branching) {
    std::vector<int> next;
    for (int node : frontier) {
      const std::span<const float> q(in.q.data() + std::size_t(node + 1) * kVocab, kVocab);
      for (int token : draw_siblings(q, k, mode, rng)) {
        next.push_back(in.tree.add_node(node, token));
        add_context(in, rng);
      }
    }
    frontier = std::move(next);
  }
  return in;
}

struct Workload {
  std::vector<Instance> instances;
  std::vector<std::vector<double>> uniforms;  // [256] per instance, round robin
};

Workload make_workload(const Shape& shape, SiblingDraw mode) {
  Philox rng(42);
  Workload w;
  for (int i = 0; i < 4; ++i) w.instances.push_back(make_instance(shape, mode, rng));
  for (int i = 0; i < 256; ++i) w.uniforms.push_back(draw_verify_uniforms(w.instances[i % 4].tree, rng));
  return w;
}

void BM_VerifyGreedy(benchmark::State& state) {
  const Shape& shape = kShapes[state.range(0)];
  const Workload w = make_workload(shape, SiblingDraw::kTopK);
  std::size_t i = 0, tokens = 0;
  for (auto _ : state) {
    const Instance& in = w.instances[i++ % 4];
    const VerifyResult r = verify_greedy(in.tree, in.argmax);
    tokens += r.tokens.size();
    benchmark::DoNotOptimize(r.tokens.data());
  }
  state.SetLabel(shape.name);
  state.counters["tokens"] = benchmark::Counter(double(tokens), benchmark::Counter::kAvgIterations);
}

void BM_VerifyStochastic(benchmark::State& state) {
  const Shape& shape = kShapes[state.range(0)];
  const SiblingDraw mode = static_cast<SiblingDraw>(state.range(1));
  const Workload w = make_workload(shape, mode);
  std::size_t i = 0, tokens = 0;
  for (auto _ : state) {
    const Instance& in = w.instances[i % 4];
    const VerifyResult r = verify_stochastic(in.tree, in.p, in.q, kVocab, w.uniforms[i % 256]);
    ++i;
    tokens += r.tokens.size();
    benchmark::DoNotOptimize(r.tokens.data());
  }
  static const char* const kModes[] = {"sampled", "without_replacement", "top_k"};
  state.SetLabel(std::string(shape.name) + " " + kModes[int(mode)]);
  state.counters["tokens"] = benchmark::Counter(double(tokens), benchmark::Counter::kAvgIterations);
}

BENCHMARK(BM_VerifyGreedy)->DenseRange(0, 3);
BENCHMARK(BM_VerifyStochastic)->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}});

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
