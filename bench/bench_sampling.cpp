// defines: the per-token cost of each sampling strategy — Sampler::distribution plus one
// draw — at vocab 4096 and 128K (and, for top-p, the sizes between), with top-p on peaked
// logits (small nucleus) and flat logits (nucleus of most of the vocabulary), next to a
// full-sort top-p for comparison.  Counter "kept": tokens with nonzero probability. And the
// logit controls' cost per row (apply_controls: every control on, a history of 512 prompt,
// 256 generated and 4 path tokens), beside greedy's, at the same sizes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/rng.h"
#include "sampling/logit_controls.h"
#include "sampling/sampler.h"

namespace {

using namespace specula;

constexpr double kPeaked = 4.0;  // logit standard deviation: the 0.9 nucleus is a few dozen tokens
constexpr double kFlat = 0.5;    // the 0.9 nucleus is most of the vocabulary

// Gaussian logits with standard deviation `sigma` (Box-Muller on a Philox stream).
std::vector<float> normal_logits(int vocab, double sigma) {
  Philox rng(2024);
  std::vector<float> logits(vocab);
  for (float& l : logits) {
    const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
    l = float(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return logits;
}

void strategy(benchmark::State& state, SamplingOptions o, double sigma) {
  const std::vector<float> logits = normal_logits(int(state.range(0)), sigma);
  std::vector<float> probs(logits.size());
  const auto sampler = make_sampler(o);
  Philox rng(1);
  for (auto _ : state) {
    sampler->distribution(logits, probs);
    benchmark::DoNotOptimize(sampler->draw(probs, rng));
  }
  state.counters["kept"] = double(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0; }));
}

// For comparison only: top-p 0.9 by sorting the whole vocabulary.
void top_p_full_sort(benchmark::State& state, double sigma) {
  const std::vector<float> logits = normal_logits(int(state.range(0)), sigma);
  const int vocab = int(logits.size());
  std::vector<float> probs(vocab);
  std::vector<int> ids(vocab);
  Philox rng(1);
  int kept = 0;
  for (auto _ : state) {
    const float max = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (int i = 0; i < vocab; ++i) z += probs[i] = std::exp(logits[i] - max);
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(),
              [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    double mass = 0;
    for (kept = 0; kept < vocab && mass < 0.9 * z; ++kept) mass += probs[ids[kept]];
    for (int r = kept; r < vocab; ++r) probs[ids[r]] = 0;
    for (int r = 0; r < kept; ++r) probs[ids[r]] = float(probs[ids[r]] / mass);
    benchmark::DoNotOptimize(inverse_cdf(probs, rng.uniform()));
  }
  state.counters["kept"] = kept;
}

// apply_controls on one row, every control on; "edits": the tokens edited.
void controls(benchmark::State& state) {
  const int vocab = int(state.range(0));
  const std::vector<float> logits = normal_logits(vocab, kPeaked);
  LogitControls c;
  c.repetition_penalty = 1.2f;
  c.frequency_penalty = 0.3f;
  c.presence_penalty = 0.2f;
  c.no_repeat_ngram_size = 3;
  for (int i = 0; i < 16; ++i) c.logit_bias.emplace_back(i * 37, 1.0f);
  c.banned_tokens = {5, 7};
  c.min_new_tokens = 1000;
  Philox rng(3);
  std::vector<int> prompt(512), generated(256), path(4);
  const std::vector<int> eos{2};
  for (std::vector<int>* part : {&prompt, &generated, &path})
    for (int& t : *part) t = int(rng.uniform() * 2000);
  std::vector<float> row;
  for (auto _ : state) {
    row = logits;
    apply_controls(c, {prompt, generated, path, eos}, std::span<float>(row));
    benchmark::DoNotOptimize(row.data());
  }
  std::vector<TokenEdit> edits;
  control_edits(c, {prompt, generated, path, eos}, vocab, edits);
  state.counters["edits"] = double(edits.size());
}

void vocab_sizes(benchmark::internal::Benchmark* b) { b->Arg(4096)->Arg(131072); }
void top_p_sizes(benchmark::internal::Benchmark* b) {
  for (int vocab = 4096; vocab <= 131072; vocab *= 2) b->Arg(vocab);
}

}  // namespace

BENCHMARK_CAPTURE(strategy, greedy, SamplingOptions{}, kPeaked)->Apply(vocab_sizes);
BENCHMARK_CAPTURE(strategy, temperature_0.8, SamplingOptions::sample(0.8f, 0, 1.0f, 0.0f), kPeaked)->Apply(vocab_sizes);
BENCHMARK_CAPTURE(strategy, top_k_50, SamplingOptions::sample(1.0f, 50, 1.0f, 0.0f), kPeaked)->Apply(vocab_sizes);
BENCHMARK_CAPTURE(strategy, min_p_0.05, SamplingOptions::sample(1.0f, 0, 1.0f, 0.05f), kPeaked)->Apply(vocab_sizes);
BENCHMARK_CAPTURE(strategy, top_p_0.9_peaked, SamplingOptions::sample(1.0f, 0, 0.9f, 0.0f), kPeaked)->Apply(top_p_sizes);
BENCHMARK_CAPTURE(strategy, top_p_0.9_flat, SamplingOptions::sample(1.0f, 0, 0.9f, 0.0f), kFlat)->Apply(top_p_sizes);
BENCHMARK_CAPTURE(top_p_full_sort, peaked, kPeaked)->Apply(vocab_sizes);
BENCHMARK_CAPTURE(top_p_full_sort, flat, kFlat)->Apply(vocab_sizes);
BENCHMARK(controls)->Apply(vocab_sizes);
BENCHMARK_MAIN();
