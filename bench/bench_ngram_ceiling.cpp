// The ceiling of prompt-lookup (n-gram) speculation on bench_batch's batch-1 workload (8
// requests of 24 prompt tokens and 48 new tokens, target-16m, one thread): how fast could any
// proposal drawn from the context's n-gram continuations make a lone sequence, if drafting and
// verification were free and the accepted length were known before the step?
//
// Each run samples the requests from the target itself (T = 1, or greedy) with a new seed and,
// at every decode position, asks which continuations the context offers: every distinct token
// that followed an earlier occurrence of its last n tokens, n = 3 down to 1 (NgramConfig's
// defaults), and the first of them, the one the n-gram drafter proposes (NgramProposer, asked
// again at every position). A position is a hit when the sampled token is among them: with
// point-mass proposals that is the chance the verifier accepts a proposal of those tokens there
// (the sum of their target probabilities), and no proposal from them can be accepted at a miss.
// The oracle then covers the positions with the cheapest steps: a step of 1 + a rows accepts
// a <= 8 hits in a row and adds the bonus token; plain decoding takes a one-row step per
// token. A step costs a target forward of its rows with their logits and target distributions,
// timed in the same run (alternated, median of 15), and both sides pay the same prefill,
// timed too.
//
// Counters: x_first / x_all = plain time over the oracle's (prefill included) with the
// drafter's own token / any continuation; hit_first / hit_all = hits per decode position;
// x_rowsN = an N-row step's time over a one-row step's.
//   OMP_NUM_THREADS=1 build/bench/bench_ngram_ceiling --benchmark_repetitions=8
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "base/rng.h"
#include "bench/bench_support.h"
#include "draft/ngram_proposer.h"
#include "kv/kv_cache.h"
#include "runtime/lap_timer.h"
#include "sampling/sampler.h"

namespace specula {
namespace {

constexpr int kRequests = 8, kPromptTokens = 24, kNewTokens = 48;
constexpr int kMaxAccepted = 8;  // twice the longest chain of bench_batch's table
constexpr NgramConfig kLookup{};  // n from 3 down to 1

// Every distinct token that followed an earlier occurrence of the context's last n tokens,
// n = kLookup.n_max down to kLookup.n_min.
std::vector<int> continuations(std::span<const int> context) {
  std::vector<int> found;
  const int length = static_cast<int>(context.size());
  for (int n = std::min(kLookup.n_max, length - 1); n >= kLookup.n_min; --n)
    for (int end = length - 2; end >= n - 1; --end)
      if (std::equal(context.begin() + (end - n + 1), context.begin() + (end + 1), context.end() - n) &&
          std::find(found.begin(), found.end(), context[end + 1]) == found.end())
        found.push_back(context[end + 1]);
  return found;
}

// args: sampled (0 greedy, 1 T = 1)
void BM_NgramCeiling(benchmark::State& state) {
  const bool sampled = state.range(0) != 0;
  omp_set_num_threads(1);
  BenchModel m(std::string(SPECULA_SOURCE_DIR) + "/models/target-16m");
  const std::size_t vocab = static_cast<std::size_t>(m.config().vocab_size);
  const std::unique_ptr<Sampler> sampler = make_sampler(SamplingOptions::sample(1.0f));
  const std::vector<int> text = real_prompt(4096);
  std::vector<float> logits(vocab * (kMaxAccepted + 1)), probs(vocab * (kMaxAccepted + 1));
  std::vector<int> positions(kPromptTokens + kNewTokens + kMaxAccepted);
  std::iota(positions.begin(), positions.end(), 0);

  // One forward of `tokens` after `seq`'s cached slots, with the logits and target distribution
  // of `logit_rows` rows (all, or the last); its seconds.
  auto step = [&](KvCache& cache, int seq, std::span<const int> tokens, RowLogits rows) {
    Clock::time_point mark = Clock::now();
    const std::size_t n = rows == RowLogits::kAll ? tokens.size() : 1;
    m.forward(cache, seq, tokens, std::span<const int>(positions).subspan(cache.length(seq), tokens.size()), rows,
              std::span(logits).first(n * vocab));
    for (std::size_t r = 0; r < n; ++r)
      sampler->distribution(std::span(logits).subspan(r * vocab, vocab), std::span(probs).subspan(r * vocab, vocab));
    return lap(mark);
  };

  static uint64_t runs = 0;
  const uint64_t seed = 5 + runs++;
  double plain_s = 0, first_s = 0, all_s = 0;
  long decode_positions = 0, hits_first = 0, hits_all = 0;
  std::array<double, kMaxAccepted + 2> row_s{};
  for (auto _ : state) {
    // Step costs at the middle of a request (24 prompt + 24 new tokens cached), alternated.
    {
      KvCache cache(m.kv_layout(16), 8);
      const int seq = cache.create();
      const std::span<const int> context(text.data(), kPromptTokens + kNewTokens / 2);
      step(cache, seq, context, RowLogits::kLast);
      std::array<std::vector<double>, kMaxAccepted + 2> times;
      for (int round = 0; round < 15; ++round)
        for (int rows = 1; rows <= kMaxAccepted + 1; ++rows) {
          times[rows].push_back(step(cache, seq, std::span(text).subspan(context.size(), rows), RowLogits::kAll));
          cache.truncate(seq, static_cast<int>(context.size()));
        }
      for (int rows = 1; rows <= kMaxAccepted + 1; ++rows) {
        std::nth_element(times[rows].begin(), times[rows].begin() + 7, times[rows].end());
        row_s[rows] = times[rows][7];
      }
    }
    for (int i = 0; i < kRequests; ++i) {
      KvCache cache(m.kv_layout(16), 8);
      const int seq = cache.create();
      std::vector<int> context(text.begin() + 97 * i, text.begin() + 97 * i + kPromptTokens);
      NgramProposer lookup({kLookup.n_min, kLookup.n_max, 1});
      lookup.append(context);
      Philox rng(seed, static_cast<uint64_t>(i));
      const double prefill_s = step(cache, seq, context, RowLogits::kLast);
      plain_s += prefill_s, first_s += prefill_s, all_s += prefill_s;
      std::vector<bool> hit_first(kNewTokens), hit_all(kNewTokens);  // [position among the new tokens]
      for (int t = 0; t < kNewTokens; ++t) {
        if (t > 0) step(cache, seq, std::span(context).last(1), RowLogits::kLast);
        const int token = sampled ? sampler->draw(std::span(probs).first(vocab), rng) : argmax(std::span(logits).first(vocab));
        const TokenTree proposal = lookup.propose();
        const std::vector<int> offered = continuations(context);
        if (proposal.size() > 0 && (offered.empty() || offered.front() != proposal.tokens.front()))
          return state.SkipWithError("the n-gram drafter's token is not the first continuation");
        hit_first[t] = proposal.size() > 0 && proposal.tokens.front() == token;
        hit_all[t] = std::find(offered.begin(), offered.end(), token) != offered.end();
        context.push_back(token);
        lookup.append(std::span(context).last(1));
      }
      // The first new token comes with the prefill; decode positions 1 .. kNewTokens - 1.
      for (int t = 1; t < kNewTokens; ++t) hits_first += hit_first[t], hits_all += hit_all[t];
      decode_positions += kNewTokens - 1;
      plain_s += (kNewTokens - 1) * row_s[1];
      // The cheapest cover of decode positions 1 .. kNewTokens - 1 by steps, each accepting up
      // to the hits that start it (at most kMaxAccepted) and adding the bonus token:
      // cost[t] = min over a of row_s[1 + a] + cost[t + a + 1].
      auto oracle_s = [&](const std::vector<bool>& hit) {
        std::vector<double> cost(kNewTokens + 1, 0.0);
        for (int t = kNewTokens - 1; t >= 1; --t) {
          cost[t] = row_s[1] + cost[t + 1];
          for (int a = 1; a <= kMaxAccepted && t + a < kNewTokens && hit[t + a - 1]; ++a)
            cost[t] = std::min(cost[t], row_s[1 + a] + cost[t + a + 1]);
        }
        return cost[1];
      };
      first_s += oracle_s(hit_first);
      all_s += oracle_s(hit_all);
    }
  }
  state.counters["x_first"] = plain_s / first_s;
  state.counters["x_all"] = plain_s / all_s;
  state.counters["hit_first"] = double(hits_first) / double(decode_positions);
  state.counters["hit_all"] = double(hits_all) / double(decode_positions);
  for (int rows = 2; rows <= kMaxAccepted + 1; ++rows)
    state.counters["x_rows" + std::to_string(rows)] = row_s[rows] / row_s[1];
  state.SetLabel(sampled ? "T=1" : "greedy");
}

BENCHMARK(BM_NgramCeiling)->Arg(1)->Arg(0)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
