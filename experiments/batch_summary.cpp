#include "experiments/batch_summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "experiments/summary.h"

namespace specula {
namespace {

using Row = std::vector<std::string>;

std::string series_of(const RunInfo& run) {
  const auto at = run.label.rfind(" · batch ");
  return at == std::string::npos ? run.label : run.label.substr(0, at);
}

std::string speedup_text(const BatchSummary& s) {
  if (!std::isfinite(s.speedup.estimate)) return "—";
  std::string out = format(s.speedup.estimate, "%.2f×");
  if (std::isfinite(s.speedup.low)) out += " [" + format(s.speedup.low, "%.2f") + ", " + format(s.speedup.high, "%.2f") + "]";
  return out;
}

// Per request rate: runs (series) as rows, batch sizes as columns.
std::string pivot(const std::vector<BatchSummary>& summaries) {
  std::set<double> rates;
  for (const BatchSummary& s : summaries) rates.insert(s.request_rate);
  std::string out;
  for (double rate : rates) {
    std::vector<int> sizes;
    std::vector<std::string> series;
    std::map<std::pair<std::string, int>, const BatchSummary*> cell;
    for (const BatchSummary& s : summaries) {
      if (s.request_rate != rate) continue;
      if (std::find(sizes.begin(), sizes.end(), s.batch_size) == sizes.end()) sizes.push_back(s.batch_size);
      if (std::find(series.begin(), series.end(), s.series) == series.end()) series.push_back(s.series);
      cell[{s.series, s.batch_size}] = &s;
    }
    std::sort(sizes.begin(), sizes.end());
    Row header = {"run"};
    for (int b : sizes) header.push_back("batch " + std::to_string(b));
    std::vector<Row> rows;
    for (const std::string& name : series) {
      Row row = {name};
      for (int b : sizes) {
        const auto it = cell.find({name, b});
        if (it == cell.end()) {
          row.push_back("");
          continue;
        }
        const BatchSummary& s = *it->second;
        std::string text = format(s.tokens_per_s, "%.1f tok/s") + " · " + format(s.ms_per_token, "%.2f ms");
        if (std::isfinite(s.speedup.estimate)) text += " · " + format(s.speedup.estimate, "%.2f×");
        row.push_back(text);
      }
      rows.push_back(std::move(row));
    }
    if (rates.size() > 1 || rate > 0)
      out += rate > 0 ? "Arrivals: Poisson, " + format(rate, "%g") + " requests/s\n\n" : "Arrivals: all at once\n\n";
    out += markdown_table(header, rows) + "\n";
  }
  return out;
}

}  // namespace

std::vector<BatchSummary> summarize_batches(const SummaryDigest& d) {
  using Line = SummaryDigest::BatchLine;
  std::vector<std::vector<const Line*>> by_run(d.batch_runs.size());
  for (const Line& line : d.batch_lines) by_run[line.run].push_back(&line);
  std::vector<std::uint32_t> order(d.batch_runs.size());  // first appearance, then by run index
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return d.batch_runs[a].info.index < d.batch_runs[b].info.index; });
  // Per run: the throughput of each (seed, repetition), for the pairing with its baseline.
  std::vector<std::map<std::string, double>> throughput(d.batch_runs.size());
  for (std::size_t run = 0; run < by_run.size(); ++run)
    for (const Line* l : by_run[run])
      throughput[run][std::to_string(l->seed) + "/" + std::to_string(l->repetition)] = l->figures[Line::kThroughput];

  std::vector<BatchSummary> out;
  for (const std::uint32_t run : order) {
    const std::vector<const Line*>& group = by_run[run];
    const SummaryDigest::BatchRun& r = d.batch_runs[run];
    BatchSummary s;
    s.run = r.info;
    s.series = series_of(s.run);
    s.batch_size = r.batch_size;
    s.request_rate = r.request_rate;
    s.lines = static_cast<int>(group.size());
    s.requests = r.requests;
    const auto med = [&](double scale, Line::Figure figure) {
      std::vector<double> values;
      for (const Line* l : group) values.push_back(scale * l->figures[figure]);
      return median(values);
    };
    s.tokens_per_s = med(1, Line::kThroughput);
    s.ms_per_token = med(1e3, Line::kItlMean);
    s.itl_p50_ms = med(1e3, Line::kItlP50);
    s.itl_p99_ms = med(1e3, Line::kItlP99);
    s.ttft_p50_ms = med(1e3, Line::kTtftP50);
    s.ttft_p99_ms = med(1e3, Line::kTtftP99);
    s.latency_p50_s = med(1, Line::kLatencyP50);
    s.latency_p99_s = med(1, Line::kLatencyP99);
    s.occupancy = med(1, Line::kOccupancy);
    s.rows_per_forward = med(1, Line::kRowsPerForward);
    if (const auto b = d.batch_run_of.find(s.run.baseline); !s.run.baseline.empty() && b != d.batch_run_of.end()) {
      const std::map<std::string, double>& base = throughput[b->second];
      std::vector<double> ratios, base_values;
      for (const auto& [key, value] : throughput[run]) {
        const auto it = base.find(key);
        if (it == base.end() || !(it->second > 0) || !(value > 0)) continue;
        ratios.push_back(value / it->second);
        base_values.push_back(it->second);
      }
      s.pairs = static_cast<int>(ratios.size());
      if (!ratios.empty()) {
        s.baseline_tokens_per_s = median(base_values);
        s.speedup = geometric_mean_interval(ratios);
        if (s.pairs < kMinPairsForInterval) s.speedup.low = s.speedup.high = NAN;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

void write_batch_csv(const std::vector<BatchSummary>& summaries, std::ostream& out) {
  out << "run,run_index,label,series,drafter,shape,variant,strategy,gamma,batch_size,request_rate,lines,requests,"
         "tokens_per_s,ms_per_token,itl_p50_ms,itl_p99_ms,ttft_p50_ms,ttft_p99_ms,latency_p50_s,latency_p99_s,"
         "mean_occupancy,rows_per_forward,baseline_tokens_per_s,speedup,speedup_ci_low,speedup_ci_high,pairs\n";
  const auto text = [](const std::string& v) {
    std::string quoted = "\"";
    for (char c : v) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  const auto num = [](double v) { return format(v, "%.6g", ""); };
  for (const BatchSummary& s : summaries) {
    const RunInfo& r = s.run;
    out << r.id << "," << r.index << "," << text(r.label) << "," << text(s.series) << "," << text(r.drafter) << ","
        << r.shape << "," << text(r.variant) << "," << text(r.strategy) << "," << r.gamma << "," << s.batch_size << ","
        << num(s.request_rate) << "," << s.lines << "," << s.requests << "," << num(s.tokens_per_s) << ","
        << num(s.ms_per_token) << "," << num(s.itl_p50_ms) << "," << num(s.itl_p99_ms) << "," << num(s.ttft_p50_ms) << ","
        << num(s.ttft_p99_ms) << "," << num(s.latency_p50_s) << "," << num(s.latency_p99_s) << "," << num(s.occupancy)
        << "," << num(s.rows_per_forward) << "," << num(s.baseline_tokens_per_s) << "," << num(s.speedup.estimate) << ","
        << num(s.speedup.low) << "," << num(s.speedup.high) << "," << s.pairs << "\n";
  }
}

std::string batch_terminal_table(const std::vector<BatchSummary>& summaries) {
  if (summaries.empty()) return "";
  return "Batched runs (output tok/s · ms per token · throughput speedup over plain decoding at the same batch size):\n\n" +
         pivot(summaries);
}

std::string batch_markdown(const std::vector<BatchSummary>& summaries) {
  if (summaries.empty()) return "";
  std::string out =
      "## Batched runs\n\nOutput throughput (tok/s) · per-token latency (mean inter-token gap, ms) · throughput "
      "speedup over plain decoding at the same batch size, per batch size (run.batch_size):\n\n" +
      pivot(summaries);
  std::vector<Row> rows;
  for (const BatchSummary& s : summaries) {
    rows.push_back({s.run.label, std::to_string(s.batch_size), format(s.request_rate, "%g"),
                    std::to_string(s.lines) + " × " + std::to_string(s.requests), format(s.tokens_per_s, "%.1f"),
                    format(s.ms_per_token, "%.2f"), format(s.itl_p50_ms, "%.2f") + " / " + format(s.itl_p99_ms, "%.2f"),
                    format(s.ttft_p50_ms, "%.1f") + " / " + format(s.ttft_p99_ms, "%.1f"),
                    format(s.latency_p50_s, "%.3f") + " / " + format(s.latency_p99_s, "%.3f"), format(s.occupancy, "%.1f"),
                    format(s.rows_per_forward, "%.1f"), speedup_text(s)});
  }
  out += "### Every figure\n\nMedians over the jobs (seeds × repetitions) of each job's figures; latencies from each "
         "request's arrival.\n\n" +
         markdown_table({"run", "batch", "rate/s", "jobs × requests", "tok/s", "ms/token", "ITL p50 / p99 ms",
                         "TTFT p50 / p99 ms", "latency p50 / p99 s", "occupancy", "rows/forward", "speedup"},
                        rows) +
         "\n";
  return out;
}

}  // namespace specula
