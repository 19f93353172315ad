#include "experiments/summary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

namespace specula {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One (prompt, seed) of a group: its lines, index[begin, end) of its Pairs (file order), and
// the medians over its repetitions.
struct Pair {
  std::uint32_t rank;  // the prompt id's rank in name order
  std::uint64_t seed;
  std::size_t begin, end;
  double decode = 0;  // decode tokens/s
  double e2e = 0;     // end-to-end tokens/s
};
// A group's samples ordered by (prompt id, seed), file order within a pair, and its pairs.
struct Pairs {
  std::vector<std::uint32_t> index;  // into SummaryDigest::samples
  std::vector<Pair> pairs;           // in (prompt id, seed) order
};

Pairs pairs_of(const SummaryDigest& d, std::vector<std::uint32_t> index, const std::vector<std::uint32_t>& rank) {
  const auto key = [&](std::uint32_t i) { return std::pair(rank[d.samples[i].prompt], d.samples[i].seed); };
  std::stable_sort(index.begin(), index.end(), [&](std::uint32_t a, std::uint32_t b) { return key(a) < key(b); });
  Pairs out{std::move(index), {}};
  std::vector<double> decode, e2e;
  for (std::size_t begin = 0, end = 0; begin < out.index.size(); begin = end) {
    decode.clear(), e2e.clear();
    for (end = begin; end < out.index.size() && key(out.index[end]) == key(out.index[begin]); ++end) {
      decode.push_back(d.samples[out.index[end]].decode_tokens_per_s);
      e2e.push_back(d.samples[out.index[end]].e2e_tokens_per_s);
    }
    const auto [r, seed] = key(out.index[begin]);
    out.pairs.push_back({r, seed, begin, end, median(decode), median(e2e)});
  }
  return out;
}

const Pair* find_pair(const Pairs& in, const Pair& like) {
  const auto it = std::lower_bound(in.pairs.begin(), in.pairs.end(), like, [](const Pair& a, const Pair& b) {
    return std::pair(a.rank, a.seed) < std::pair(b.rank, b.seed);
  });
  return it != in.pairs.end() && it->rank == like.rank && it->seed == like.seed ? &*it : nullptr;
}

RunSummary summarize_group(const SummaryDigest& d, const RunInfo& run, const std::string& domain,
                           const SummaryDigest::Group& g, const Pairs& own, const Pairs* baseline) {
  RunSummary s;
  s.run = run;
  s.settings = g.settings;
  s.domain = domain;
  s.lines = g.lines;
  const bool drafts = g.drafted > 0;
  s.units = static_cast<int>(own.pairs.size());
  std::vector<std::pair<double, double>> acceptance_units, tau_units;
  for (const Pair& p : own.pairs) {  // the units' sums, in file order
    std::array<double, 4> u{};       // accepted, drafted, τ·rounds, rounds
    for (std::size_t k = p.begin; k < p.end; ++k) {
      const SummaryDigest::Sample& line = d.samples[own.index[k]];
      u[0] += line.accepted;
      u[1] += line.drafted;
      u[2] += line.tau_rounds;
      u[3] += line.rounds;
    }
    acceptance_units.emplace_back(u[0], u[1]);
    tau_units.emplace_back(u[2], u[3]);
  }
  s.acceptance_rate = drafts ? g.accepted / g.drafted : kNaN;
  s.tau = drafts && g.rounds > 0 ? g.tau_sum / g.rounds : kNaN;
  s.acceptance_interval = {s.acceptance_rate, kNaN, kNaN};
  s.tau_interval = {s.tau, kNaN, kNaN};
  if (drafts && s.units >= kMinPairsForInterval) {
    s.acceptance_interval = bootstrap_ratio_interval(acceptance_units);
    s.tau_interval = bootstrap_ratio_interval(tau_units);
  }
  s.alpha = drafts && run.shape == "chain" ? chain_acceptance_mle(g.accepted, g.rounds - g.full_rounds) : kNaN;
  for (double r : g.reached) s.depth_acceptance.push_back(g.rounds > 0 ? r / g.rounds : kNaN);
  s.depth_conditional = conditional_acceptance(g.reached, g.rounds);
  if (drafts) s.accepted_histogram = accepted_histogram(g.reached, g.rounds);
  s.cpu_share = g.thread_wall_s > 0 ? g.cpu_s / g.thread_wall_s : kNaN;
  s.draft_share = g.decode_time > 0 ? g.draft_s / g.decode_time : kNaN;
  s.verify_share = g.decode_time > 0 ? g.verify_s / g.decode_time : kNaN;
  s.sample_share = g.decode_time > 0 ? g.sample_s / g.decode_time : kNaN;
  s.commit_share = g.decode_time > 0 ? g.commit_s / g.decode_time : kNaN;

  double decode_sum = 0, e2e_sum = 0;
  for (const Pair& p : own.pairs) decode_sum += p.decode, e2e_sum += p.e2e;
  s.tokens_per_s = own.pairs.empty() ? kNaN : decode_sum / own.pairs.size();
  s.e2e_tokens_per_s = own.pairs.empty() ? kNaN : e2e_sum / own.pairs.size();

  struct Ratio {
    double decode, e2e;
    const Pair *own, *baseline;
  };
  std::vector<Ratio> ratios;
  double baseline_sum = 0;
  if (baseline) {
    for (const Pair& p : own.pairs) {
      const Pair* b = find_pair(*baseline, p);
      if (b == nullptr || b->decode <= 0 || p.decode <= 0) continue;
      const bool timed = b->e2e > 0 && p.e2e > 0;  // lines without time_s have no end-to-end rate
      ratios.push_back({p.decode / b->decode, timed ? p.e2e / b->e2e : kNaN, &p, b});
      baseline_sum += b->decode;
    }
  }
  std::vector<double> decode_ratios, e2e_ratios;
  for (const Ratio& r : ratios) {
    decode_ratios.push_back(r.decode);
    if (std::isfinite(r.e2e)) e2e_ratios.push_back(r.e2e);
  }
  s.pairs = static_cast<int>(ratios.size());
  s.baseline_tokens_per_s = ratios.empty() ? kNaN : baseline_sum / ratios.size();
  s.speedup = geometric_mean_interval(decode_ratios);
  s.e2e_speedup = geometric_mean_interval(e2e_ratios);
  // Seconds per drafted token over seconds per token of the target decoding alone.
  s.cost_ratio = drafts && !ratios.empty() ? g.draft_s / g.drafted * s.baseline_tokens_per_s : kNaN;
  s.predicted_speedup = std::isfinite(s.alpha) && std::isfinite(s.cost_ratio)
                            ? leviathan_speedup(s.alpha, run.gamma, s.cost_ratio)
                            : kNaN;
  const bool rounds_timed = std::isfinite(s.tau) && !ratios.empty() && g.rounds > 0 && g.verify_s > 0;
  s.verify_cost = rounds_timed ? g.verify_s / g.rounds * s.baseline_tokens_per_s : kNaN;
  s.cost_predicted_speedup =
      rounds_timed ? s.tau / ((g.draft_s + g.verify_s) / g.rounds * s.baseline_tokens_per_s) : kNaN;
  s.bound = std::isfinite(s.tau) && !ratios.empty() && g.rounds > 0
                ? speedup_bound(s.tau, g.draft_s / g.rounds * s.baseline_tokens_per_s)
                : kNaN;
  // Decode only: the prefill, the same work in both runs, moves the end-to-end ratio towards
  // 1, which may lie above a bound below 1.
  if (s.speedup.estimate > s.bound) {
    for (const Ratio& r : ratios) {
      if (r.decode <= s.bound) continue;
      for (const auto& [pair, pairs] : {std::pair(r.own, &own), std::pair(r.baseline, baseline)})
        for (std::size_t k = pair->begin; k < pair->end; ++k) s.suspect_lines.push_back(d.samples[pairs->index[k]].ordinal);
    }
  }
  return s;
}

}  // namespace

std::vector<RunSummary> summarize(const SummaryDigest& d) {
  std::vector<std::uint32_t> by_name(d.prompts.size()), rank(d.prompts.size());
  std::iota(by_name.begin(), by_name.end(), 0u);
  std::sort(by_name.begin(), by_name.end(), [&](std::uint32_t a, std::uint32_t b) { return d.prompts[a] < d.prompts[b]; });
  for (std::uint32_t r = 0; r < by_name.size(); ++r) rank[by_name[r]] = r;
  std::vector<std::vector<std::uint32_t>> of_run(d.runs.size());  // each run's samples, in file order
  for (std::size_t i = 0; i < d.samples.size(); ++i) of_run[d.samples[i].run].push_back(static_cast<std::uint32_t>(i));
  std::vector<Pairs> all;  // [run]: its pairs over all domains (also a baseline's timings)
  for (std::vector<std::uint32_t>& index : of_run) all.push_back(pairs_of(d, std::move(index), rank));

  // Domains by their least prompt index, runs by their index (ties: names in name order).
  std::vector<std::uint32_t> domains(d.domains.size());
  std::iota(domains.begin(), domains.end(), 0u);
  std::sort(domains.begin(), domains.end(), [&](std::uint32_t a, std::uint32_t b) { return d.domains[a] < d.domains[b]; });
  std::sort(domains.begin(), domains.end(),
            [&](std::uint32_t a, std::uint32_t b) { return d.domain_first_prompt[a] < d.domain_first_prompt[b]; });
  std::vector<std::uint32_t> ordered;
  for (const auto& [id, r] : d.run_of) ordered.push_back(r);
  std::sort(ordered.begin(), ordered.end(),
            [&](std::uint32_t a, std::uint32_t b) { return d.runs[a].info.index < d.runs[b].info.index; });

  std::vector<RunSummary> out;
  for (const std::uint32_t r : ordered) {
    const SummaryDigest::Run& run = d.runs[r];
    const auto b = d.run_of.find(run.info.baseline);
    const Pairs* baseline = b == d.run_of.end() ? nullptr : &all[b->second];
    out.push_back(summarize_group(d, run.info, "all", run.all, all[r], baseline));
    for (const std::uint32_t domain : domains) {
      const auto g = run.by_domain.find(domain);
      if (g == run.by_domain.end()) continue;
      std::vector<std::uint32_t> in_domain;
      for (const std::uint32_t i : all[r].index)
        if (d.samples[i].domain == domain) in_domain.push_back(i);
      out.push_back(summarize_group(d, run.info, d.domains[domain], g->second, pairs_of(d, std::move(in_domain), rank),
                                    baseline));
    }
  }
  return out;
}

void name_suspect_jobs(std::vector<RunSummary>& summaries, const std::function<std::string(std::uint32_t)>& key_of) {
  for (RunSummary& s : summaries) {
    s.suspect_jobs.clear();
    for (const std::uint32_t line : s.suspect_lines) s.suspect_jobs.push_back(key_of(line));
  }
}

std::vector<RunSummary> summarize(const std::vector<nlohmann::json>& lines) {
  std::vector<RunSummary> out = summarize(digest_of(lines));
  name_suspect_jobs(out, [&](std::uint32_t line) { return lines.at(line).at("key").get<std::string>(); });
  return out;
}

}  // namespace specula
