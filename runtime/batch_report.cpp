#include "runtime/batch_report.h"

#include <algorithm>
#include <numeric>

namespace specula {
namespace {

double mean(const std::vector<double>& values) {
  return values.empty() ? 0.0 : std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
}

std::vector<double> gaps(const RequestOutcome& o) {
  std::vector<double> out;
  for (std::size_t i = 1; i < o.token_s.size(); ++i) out.push_back(o.token_s[i] - o.token_s[i - 1]);
  return out;
}

nlohmann::json distribution(const std::vector<double>& values) {
  return {{"mean", mean(values)}, {"p50", percentile(values, 50)}, {"p90", percentile(values, 90)},
          {"p99", percentile(values, 99)}};
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double at = p / 100.0 * double(values.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (at - double(lo)) * (values[hi] - values[lo]);
}

nlohmann::json request_latency(const RequestOutcome& o) {
  const std::vector<double> g = gaps(o);
  return {{"ttft_s", o.first_token_s - o.submitted_s},
          {"inter_token_s", {{"mean", mean(g)}, {"p50", percentile(g, 50)}, {"p99", percentile(g, 99)}}},
          {"latency_s", o.finished_s - o.submitted_s}};
}

nlohmann::json batch_summary(const Scheduler& scheduler, std::span<const int> requests, double wall_s) {
  std::vector<double> latency, ttft, inter_token;
  long new_tokens = 0;
  for (int r : requests) {
    const RequestOutcome& o = scheduler.outcome(r);
    for (const auto& sample : o.samples) new_tokens += static_cast<long>(sample.size());
    latency.push_back(o.finished_s - o.submitted_s);
    ttft.push_back(o.first_token_s - o.submitted_s);
    const std::vector<double> g = gaps(o);
    inter_token.insert(inter_token.end(), g.begin(), g.end());
  }
  const SchedulerStats& s = scheduler.stats();
  return {{"requests", requests.size()},
          {"new_tokens", new_tokens},
          {"time_s", wall_s},
          {"throughput_tokens_per_s", wall_s > 0 ? double(new_tokens) / wall_s : 0.0},
          {"latency_s", distribution(latency)},
          {"ttft_s", distribution(ttft)},
          {"inter_token_s", distribution(inter_token)},
          {"target_forwards", s.steps},
          {"rows_per_forward", s.steps ? double(s.rows) / double(s.steps) : 0.0},
          {"mean_occupancy", s.steps ? double(s.sequence_steps) / double(s.steps) : 0.0},
          {"kv_pool_blocks", scheduler.kv_stats().blocks_total},
          {"preemptions", s.preemptions},
          {"device_verified", s.device_verified},
          {"device_drafted", s.device_drafted},
          {"device_chained", s.device_chained}};
}

}  // namespace specula
