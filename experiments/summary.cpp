#include "experiments/summary.h"

#include <algorithm>
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

// Mean decode tokens/s of each (prompt, seed) over the repetitions in `lines`.
std::map<PairKey, double> pair_means(const std::vector<const nlohmann::json*>& lines) {
  std::map<PairKey, std::pair<double, int>> sums;
  for (const nlohmann::json* l : lines) {
    auto& [sum, n] = sums[pair_of(*l)];
    sum += stat(*l, "decode_tokens_per_s");
    ++n;
  }
  std::map<PairKey, double> means;
  for (const auto& [key, s] : sums) means[key] = s.first / s.second;
  return means;
}

RunSummary summarize_group(const RunInfo& run, const std::string& domain, const std::vector<const nlohmann::json*>& lines,
                           const std::map<PairKey, double>* baseline) {
  RunSummary s;
  s.run = run;
  s.domain = domain;
  s.lines = static_cast<int>(lines.size());
  double drafted = 0, accepted = 0, rounds = 0, tau_sum = 0, full_rounds = 0, tokens_per_s = 0;
  double draft_s = 0, verify_s = 0, sample_s = 0, commit_s = 0, decode_time = 0;  // decode: after prefill
  std::vector<double> reached;  // rounds whose accepted path reached depth d + 1
  for (const nlohmann::json* l : lines) {
    const double steps = stat(*l, "steps");
    drafted += stat(*l, "drafted");
    accepted += stat(*l, "accepted");
    rounds += steps;
    tau_sum += stat(*l, "mean_accepted_tokens") * steps;
    tokens_per_s += stat(*l, "decode_tokens_per_s");
    if (const nlohmann::json* b = time_breakdown(*l)) {
      const double rate = stat(*l, "decode_tokens_per_s");
      if (rate > 0) decode_time += stat(*l, "new_tokens") / rate;
      draft_s += b->value("draft_s", 0.0);
      verify_s += b->value("verify_forward_s", 0.0);
      sample_s += b->value("sample_verify_s", 0.0);
      commit_s += b->value("commit_s", 0.0);
    }
    const nlohmann::json per_depth = l->at("stats").value("accepted_per_depth", nlohmann::json::array());
    if (reached.size() < per_depth.size()) reached.resize(per_depth.size(), 0.0);
    for (std::size_t d = 0; d < per_depth.size(); ++d) reached[d] += per_depth[d].get<double>() * steps;
    if (run.gamma > 0 && per_depth.size() >= static_cast<std::size_t>(run.gamma)) {
      full_rounds += per_depth[run.gamma - 1].get<double>() * steps;
    }
  }
  const bool drafts = drafted > 0;
  s.acceptance_rate = drafts ? accepted / drafted : kNaN;
  s.alpha = drafts && run.shape == "chain" ? chain_acceptance_mle(accepted, rounds - full_rounds) : kNaN;
  s.tau = drafts && rounds > 0 ? tau_sum / rounds : kNaN;
  for (double r : reached) s.depth_acceptance.push_back(rounds > 0 ? r / rounds : kNaN);
  s.tokens_per_s = lines.empty() ? kNaN : tokens_per_s / lines.size();
  s.draft_share = decode_time > 0 ? draft_s / decode_time : kNaN;
  s.verify_share = decode_time > 0 ? verify_s / decode_time : kNaN;
  s.sample_share = decode_time > 0 ? sample_s / decode_time : kNaN;
  s.commit_share = decode_time > 0 ? commit_s / decode_time : kNaN;

  std::vector<double> ratios;
  double baseline_sum = 0;
  if (baseline) {
    for (const auto& [key, tps] : pair_means(lines)) {
      const auto it = baseline->find(key);
      if (it == baseline->end() || it->second <= 0 || tps <= 0) continue;
      ratios.push_back(tps / it->second);
      baseline_sum += it->second;
    }
  }
  s.pairs = static_cast<int>(ratios.size());
  s.baseline_tokens_per_s = ratios.empty() ? kNaN : baseline_sum / ratios.size();
  s.speedup = geometric_mean_interval(ratios);
  // Seconds per drafted token over seconds per token of the target decoding alone.
  s.cost_ratio = drafts && !ratios.empty() ? draft_s / drafted * s.baseline_tokens_per_s : kNaN;
  s.predicted_speedup = std::isfinite(s.alpha) && std::isfinite(s.cost_ratio)
                            ? leviathan_speedup(s.alpha, run.gamma, s.cost_ratio)
                            : kNaN;
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

  std::map<std::string, std::map<PairKey, double>> means;  // run id -> pair means
  for (const auto& [id, g] : runs) means[id] = pair_means(g.lines);

  std::vector<RunSummary> out;
  for (const Group* g : ordered) {
    const auto b = means.find(g->info.baseline);
    const std::map<PairKey, double>* baseline = b == means.end() ? nullptr : &b->second;
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
