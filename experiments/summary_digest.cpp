#include "experiments/summary_digest.h"

#include <algorithm>
#include <cmath>

namespace specula {
namespace {

double stat(const nlohmann::json& stats, const char* key) {
  const auto it = stats.find(key);
  return it == stats.end() || !it->is_number() ? 0.0 : it->get<double>();
}

// A batch summary's figure, or its `part` ("p50" of "ttft_s"); NaN when absent.
double figure(const nlohmann::json& stats, const char* field, const char* part = nullptr) {
  const auto it = stats.find(field);
  if (it == stats.end()) return NAN;
  if (part == nullptr) return it->is_number() ? it->get<double>() : NAN;
  return it->is_object() && it->contains(part) && (*it)[part].is_number() ? (*it)[part].get<double>() : NAN;
}

// line[name], or an empty object when the line has none (lines held in memory need not have
// every field read_results requires).
const nlohmann::json& object_or_empty(const nlohmann::json& line, const char* name) {
  static const nlohmann::json empty = nlohmann::json::object();
  const auto it = line.find(name);
  return it == line.end() ? empty : *it;
}

std::uint32_t intern(const std::string& name, std::map<std::string, std::uint32_t>& index, std::vector<std::string>& names) {
  const auto [it, fresh] = index.try_emplace(name, static_cast<std::uint32_t>(names.size()));
  if (fresh) names.push_back(name);
  return it->second;
}

// Folds one line into a group's sums (the line's stats, machine and settings).
void fold(SummaryDigest::Group& g, const nlohmann::json& line, int gamma) {
  if (g.lines++ == 0) g.settings = line.value("settings", nlohmann::json::object());
  const nlohmann::json& machine = object_or_empty(line, "machine");
  if (machine.contains("cpu_s") && machine.contains("wall_s")) {
    g.cpu_s += machine["cpu_s"].get<double>();
    g.thread_wall_s += machine["wall_s"].get<double>() * std::max(1, machine.value("threads", 1));
  }
  const nlohmann::json& s = line.at("stats");
  const double steps = stat(s, "steps");
  g.drafted += stat(s, "drafted");
  g.accepted += stat(s, "accepted");
  g.rounds += steps;
  g.tau_sum += stat(s, "mean_accepted_tokens") * steps;
  if (const auto b = s.find("time_breakdown"); b != s.end()) {
    g.decode_time += stat(s, "decode_s");
    g.draft_s += b->value("draft_s", 0.0);
    g.verify_s += b->value("verify_forward_s", 0.0);
    g.sample_s += b->value("sample_verify_s", 0.0);
    g.commit_s += b->value("commit_s", 0.0);
  }
  // The engine reports shares of its rounds; shares × steps are the counts (rounded off the
  // division's last bit).
  const auto per_depth = s.find("accepted_per_depth");
  if (per_depth == s.end()) return;
  if (g.reached.size() < per_depth->size()) g.reached.resize(per_depth->size(), 0.0);
  for (std::size_t d = 0; d < per_depth->size(); ++d) g.reached[d] += std::round((*per_depth)[d].get<double>() * steps);
  if (gamma > 0 && per_depth->size() >= static_cast<std::size_t>(gamma))
    g.full_rounds += std::round((*per_depth)[gamma - 1].get<double>() * steps);
}

}  // namespace

void SummaryDigest::add(const nlohmann::json& line, std::uint32_t ordinal) {
  ++lines;
  versions.insert(object_or_empty(line, "machine").value("version", "unknown"));
  const std::string id = line.at("run").get<std::string>();
  const nlohmann::json& stats = line.at("stats");
  if (line.contains("requests")) {  // a batched job
    const auto [it, fresh] = batch_run_of.try_emplace(id, static_cast<std::uint32_t>(batch_runs.size()));
    if (fresh) {
      BatchRun r;
      r.info = run_info_from(line);
      const nlohmann::json& settings = line.at("settings");
      r.batch_size = settings.value("batch_size", 0);
      r.request_rate = settings.value("request_rate", 0.0);
      r.requests = static_cast<int>(line.at("requests").size());
      batch_runs.push_back(std::move(r));
    }
    BatchLine b{it->second, line.at("repetition").get<int>(), line.at("seed").get<std::uint64_t>(), {}};
    b.figures[BatchLine::kThroughput] = figure(stats, "throughput_tokens_per_s");
    b.figures[BatchLine::kItlMean] = figure(stats, "inter_token_s", "mean");
    b.figures[BatchLine::kItlP50] = figure(stats, "inter_token_s", "p50");
    b.figures[BatchLine::kItlP99] = figure(stats, "inter_token_s", "p99");
    b.figures[BatchLine::kTtftP50] = figure(stats, "ttft_s", "p50");
    b.figures[BatchLine::kTtftP99] = figure(stats, "ttft_s", "p99");
    b.figures[BatchLine::kLatencyP50] = figure(stats, "latency_s", "p50");
    b.figures[BatchLine::kLatencyP99] = figure(stats, "latency_s", "p99");
    b.figures[BatchLine::kOccupancy] = figure(stats, "mean_occupancy");
    b.figures[BatchLine::kRowsPerForward] = figure(stats, "rows_per_forward");
    batch_lines.push_back(b);
    return;
  }
  const auto [it, fresh] = run_of.try_emplace(id, static_cast<std::uint32_t>(runs.size()));
  if (fresh) runs.push_back({run_info_from(line), {}, {}});
  Run& run = runs[it->second];
  const std::uint32_t domain = intern(line.at("domain").get<std::string>(), domain_of_, domains);
  const int prompt_index = line.at("prompt_index").get<int>();
  if (domain == domain_first_prompt.size()) domain_first_prompt.push_back(prompt_index);
  domain_first_prompt[domain] = std::min(domain_first_prompt[domain], prompt_index);
  fold(run.all, line, run.info.gamma);
  fold(run.by_domain[domain], line, run.info.gamma);

  const double steps = stat(stats, "steps"), time = stat(stats, "time_s");
  samples.push_back({it->second, domain, intern(line.at("prompt_id").get<std::string>(), prompt_of_, prompts), ordinal,
                     line.at("seed").get<std::uint64_t>(), stat(stats, "decode_tokens_per_s"),
                     time > 0 ? stat(stats, "new_tokens") / time : 0.0, stat(stats, "accepted"), stat(stats, "drafted"),
                     stat(stats, "mean_accepted_tokens") * steps, steps});
}

SummaryDigest digest_of(const std::vector<nlohmann::json>& lines) {
  SummaryDigest digest;
  for (std::size_t i = 0; i < lines.size(); ++i) digest.add(lines[i], static_cast<std::uint32_t>(i));
  return digest;
}

}  // namespace specula
