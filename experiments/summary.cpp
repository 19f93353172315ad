#include "experiments/summary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

namespace specula {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double stat(const nlohmann::json& line, const char* key) {
  const nlohmann::json& s = line.at("stats");
  const auto it = s.find(key);
  return it == s.end() || !it->is_number() ? 0.0 : it->get<double>();
}

const nlohmann::json* time_breakdown(const nlohmann::json& line) {
  const nlohmann::json& s = line.at("stats");
  const auto it = s.find("time_breakdown");
  return it == s.end() ? nullptr : &*it;
}


using PairKey = std::pair<std::string, uint64_t>;  // (prompt id, seed)

PairKey pair_of(const nlohmann::json& line) {
  return {line.at("prompt_id").get<std::string>(), line.at("seed").get<uint64_t>()};
}

// Tokens per second of the whole request, prefill included.
double e2e_tokens_per_s(const nlohmann::json& line) {
  const double time = stat(line, "time_s");
  return time > 0 ? stat(line, "new_tokens") / time : 0.0;
}

// One (prompt, seed) of a run: the medians over its repetitions and their job keys.
struct PairTiming {
  double decode = 0;  // decode tokens/s
  double e2e = 0;     // end-to-end tokens/s
  std::vector<std::string> keys;
};
using Timings = std::map<PairKey, PairTiming>;

Timings pair_timings(const std::vector<const nlohmann::json*>& lines) {
  std::map<PairKey, std::pair<std::vector<double>, std::vector<double>>> samples;
  Timings out;
  for (const nlohmann::json* l : lines) {
    auto& [decode, e2e] = samples[pair_of(*l)];
    decode.push_back(stat(*l, "decode_tokens_per_s"));
    e2e.push_back(e2e_tokens_per_s(*l));
    out[pair_of(*l)].keys.push_back(l->at("key").get<std::string>());
  }
  for (auto& [key, t] : out) {
    t.decode = median(samples[key].first);
    t.e2e = median(samples[key].second);
  }
  return out;
}

RunSummary summarize_group(const RunInfo& run, const std::string& domain, const std::vector<const nlohmann::json*>& lines,
                           const Timings* baseline) {
  RunSummary s;
  s.run = run;
  s.settings = lines.front()->value("settings", nlohmann::json::object());
  s.domain = domain;
  s.lines = static_cast<int>(lines.size());
  double drafted = 0, accepted = 0, rounds = 0, tau_sum = 0, full_rounds = 0;
  double draft_s = 0, verify_s = 0, sample_s = 0, commit_s = 0, decode_time = 0;  // decode: after prefill
  std::vector<double> reached;  // rounds whose accepted path reached depth d + 1
  std::map<PairKey, std::array<double, 4>> units;  // accepted, drafted, τ·rounds, rounds
  double cpu_s = 0, thread_wall_s = 0;
  for (const nlohmann::json* l : lines) {
    const nlohmann::json machine = l->value("machine", nlohmann::json::object());
    if (machine.contains("cpu_s") && machine.contains("wall_s")) {
      cpu_s += machine["cpu_s"].get<double>();
      thread_wall_s += machine["wall_s"].get<double>() * std::max(1, machine.value("threads", 1));
    }
    const double steps = stat(*l, "steps");
    drafted += stat(*l, "drafted");
    accepted += stat(*l, "accepted");
    rounds += steps;
    tau_sum += stat(*l, "mean_accepted_tokens") * steps;
    std::array<double, 4>& unit = units[pair_of(*l)];
    unit[0] += stat(*l, "accepted");
    unit[1] += stat(*l, "drafted");
    unit[2] += stat(*l, "mean_accepted_tokens") * steps;
    unit[3] += steps;
    if (const nlohmann::json* b = time_breakdown(*l)) {
      const double rate = stat(*l, "decode_tokens_per_s");
      if (rate > 0) decode_time += stat(*l, "new_tokens") / rate;
      draft_s += b->value("draft_s", 0.0);
      verify_s += b->value("verify_forward_s", 0.0);
      sample_s += b->value("sample_verify_s", 0.0);
      commit_s += b->value("commit_s", 0.0);
    }
    // The engine reports shares of its rounds; shares × steps are the counts (rounded off
    // the division's last bit).
    const nlohmann::json per_depth = l->at("stats").value("accepted_per_depth", nlohmann::json::array());
    if (reached.size() < per_depth.size()) reached.resize(per_depth.size(), 0.0);
    for (std::size_t d = 0; d < per_depth.size(); ++d) reached[d] += std::round(per_depth[d].get<double>() * steps);
    if (run.gamma > 0 && per_depth.size() >= static_cast<std::size_t>(run.gamma)) {
      full_rounds += std::round(per_depth[run.gamma - 1].get<double>() * steps);
    }
  }
  const bool drafts = drafted > 0;
  s.units = static_cast<int>(units.size());
  std::vector<std::pair<double, double>> acceptance_units, tau_units;
  for (const auto& [key, u] : units) {
    acceptance_units.emplace_back(u[0], u[1]);
    tau_units.emplace_back(u[2], u[3]);
  }
  s.acceptance_rate = drafts ? accepted / drafted : kNaN;
  s.tau = drafts && rounds > 0 ? tau_sum / rounds : kNaN;
  s.acceptance_interval = {s.acceptance_rate, kNaN, kNaN};
  s.tau_interval = {s.tau, kNaN, kNaN};
  if (drafts && s.units >= kMinPairsForInterval) {
    s.acceptance_interval = bootstrap_ratio_interval(acceptance_units);
    s.tau_interval = bootstrap_ratio_interval(tau_units);
  }
  s.alpha = drafts && run.shape == "chain" ? chain_acceptance_mle(accepted, rounds - full_rounds) : kNaN;
  for (double r : reached) s.depth_acceptance.push_back(rounds > 0 ? r / rounds : kNaN);
  s.depth_conditional = conditional_acceptance(reached, rounds);
  if (drafts) s.accepted_histogram = accepted_histogram(reached, rounds);
  s.cpu_share = thread_wall_s > 0 ? cpu_s / thread_wall_s : kNaN;
  s.draft_share = decode_time > 0 ? draft_s / decode_time : kNaN;
  s.verify_share = decode_time > 0 ? verify_s / decode_time : kNaN;
  s.sample_share = decode_time > 0 ? sample_s / decode_time : kNaN;
  s.commit_share = decode_time > 0 ? commit_s / decode_time : kNaN;

  const Timings own = pair_timings(lines);
  double decode_sum = 0, e2e_sum = 0;
  for (const auto& [key, t] : own) decode_sum += t.decode, e2e_sum += t.e2e;
  s.tokens_per_s = own.empty() ? kNaN : decode_sum / own.size();
  s.e2e_tokens_per_s = own.empty() ? kNaN : e2e_sum / own.size();

  struct Ratio {
    double decode, e2e;
    const PairTiming *own, *baseline;
  };
  std::vector<Ratio> ratios;
  double baseline_sum = 0;
  if (baseline) {
    for (const auto& [key, t] : own) {
      const auto it = baseline->find(key);
      if (it == baseline->end() || it->second.decode <= 0 || t.decode <= 0) continue;
      const bool timed = it->second.e2e > 0 && t.e2e > 0;  // lines without time_s have no end-to-end rate
      ratios.push_back({t.decode / it->second.decode, timed ? t.e2e / it->second.e2e : kNaN, &t, &it->second});
      baseline_sum += it->second.decode;
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
  s.cost_ratio = drafts && !ratios.empty() ? draft_s / drafted * s.baseline_tokens_per_s : kNaN;
  s.predicted_speedup = std::isfinite(s.alpha) && std::isfinite(s.cost_ratio)
                            ? leviathan_speedup(s.alpha, run.gamma, s.cost_ratio)
                            : kNaN;
  s.bound = std::isfinite(s.tau) && !ratios.empty() && rounds > 0
                ? speedup_bound(s.tau, draft_s / rounds * s.baseline_tokens_per_s)
                : kNaN;
  // Decode only: the prefill, the same work in both runs, moves the end-to-end ratio towards
  // 1, which may lie above a bound below 1.
  if (s.speedup.estimate > s.bound) {
    for (const Ratio& r : ratios) {
      if (r.decode <= s.bound) continue;
      for (const PairTiming* t : {r.own, r.baseline}) {
        s.suspect_jobs.insert(s.suspect_jobs.end(), t->keys.begin(), t->keys.end());
      }
    }
  }
  return s;
}

}  // namespace

std::vector<RunSummary> summarize(const std::vector<nlohmann::json>& lines) {
  struct Group {
    RunInfo info;
    std::vector<const nlohmann::json*> lines;
  };
  std::map<std::string, Group> runs;
  std::map<std::string, int> domain_order;  // domain -> first prompt index
  for (const nlohmann::json& l : lines) {
    const std::string id = l.at("run").get<std::string>();
    auto [it, inserted] = runs.try_emplace(id);
    if (inserted) it->second.info = run_info_from(l);
    it->second.lines.push_back(&l);
    const std::string domain = l.at("domain").get<std::string>();
    const int prompt_index = l.at("prompt_index").get<int>();
    const auto [d, fresh] = domain_order.try_emplace(domain, prompt_index);
    d->second = std::min(d->second, prompt_index);
  }
  std::vector<std::string> domains;
  for (const auto& [d, order] : domain_order) domains.push_back(d);
  std::sort(domains.begin(), domains.end(), [&](const auto& a, const auto& b) { return domain_order[a] < domain_order[b]; });
  std::vector<const Group*> ordered;
  for (const auto& [id, g] : runs) ordered.push_back(&g);
  std::sort(ordered.begin(), ordered.end(), [](const Group* a, const Group* b) { return a->info.index < b->info.index; });

  std::map<std::string, Timings> timings;  // run id -> its pairs
  for (const auto& [id, g] : runs) timings[id] = pair_timings(g.lines);

  std::vector<RunSummary> out;
  for (const Group* g : ordered) {
    const auto b = timings.find(g->info.baseline);
    const Timings* baseline = b == timings.end() ? nullptr : &b->second;
    out.push_back(summarize_group(g->info, "all", g->lines, baseline));
    for (const std::string& domain : domains) {
      std::vector<const nlohmann::json*> in_domain;
      for (const nlohmann::json* l : g->lines) {
        if (l->at("domain").get<std::string>() == domain) in_domain.push_back(l);
      }
      if (!in_domain.empty()) out.push_back(summarize_group(g->info, domain, in_domain, baseline));
    }
  }
  return out;
}

}  // namespace specula
