// The writers of summary.csv, summary.md and the terminal tables (see summary.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "experiments/summary.h"

namespace specula {
namespace {

using Row = std::vector<std::string>;

std::string format(double v, const char* spec, const char* missing = "—") {
  if (!std::isfinite(v)) return missing;
  char out[64];
  std::snprintf(out, sizeof out, spec, v);
  return out;
}

std::string speedup_cell(const Interval& s) {
  if (!std::isfinite(s.estimate)) return "—";
  std::string out = format(s.estimate, "%.2f×");
  if (std::isfinite(s.low)) out += " [" + format(s.low, "%.2f") + ", " + format(s.high, "%.2f") + "]";
  return out;
}

std::string time_cell(const RunSummary& s) {
  if (!std::isfinite(s.draft_share)) return "—";
  std::string out;
  for (double share : {s.draft_share, s.verify_share, s.sample_share, s.commit_share}) {
    out += (out.empty() ? "" : " / ") + format(100 * share, "%.0f%%");
  }
  return out;
}

std::size_t display_width(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

std::string markdown_table(const Row& header, const std::vector<Row>& rows) {
  std::vector<std::size_t> width(header.size(), 3);
  auto widen = [&](const Row& r) {
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], display_width(r[c]));
  };
  widen(header);
  for (const Row& r : rows) widen(r);
  auto line = [&](const Row& r) {
    std::string out = "|";
    for (std::size_t c = 0; c < r.size(); ++c) out += " " + r[c] + std::string(width[c] - display_width(r[c]), ' ') + " |";
    return out + "\n";
  };
  std::string out = line(header) + "|";
  for (std::size_t w : width) out += std::string(w + 2, '-') + "|";
  out += "\n";
  for (const Row& r : rows) out += line(r);
  return out;
}

bool drafts(const RunSummary& s) { return s.run.shape != "none"; }

std::string overview(const std::vector<RunSummary>& summaries) {
  std::vector<Row> rows;
  for (const RunSummary& s : summaries) {
    if (s.domain != "all") continue;
    rows.push_back({s.run.label, std::to_string(s.lines), format(s.acceptance_rate, "%.3f"), format(s.tau, "%.2f"),
                    format(s.tokens_per_s, "%.1f"), speedup_cell(s.speedup), format(s.predicted_speedup, "%.2f×"),
                    format(s.cost_ratio, "%.3f"), time_cell(s)});
  }
  return markdown_table({"run", "n", "acc. rate", "τ", "tok/s", "speedup [95% CI]", "predicted", "c",
                         "decode time: draft / verify / sample / commit"},
                        rows);
}

std::string per_domain(const std::vector<RunSummary>& summaries) {
  std::vector<Row> rows;
  for (const RunSummary& s : summaries) {
    rows.push_back({s.run.label, s.domain, std::to_string(s.lines), format(s.acceptance_rate, "%.3f"),
                    format(s.alpha, "%.3f"), format(s.tau, "%.2f"), format(s.tokens_per_s, "%.1f"),
                    speedup_cell(s.speedup), format(s.predicted_speedup, "%.2f×")});
  }
  return markdown_table({"run", "domain", "n", "acc. rate", "α", "τ", "tok/s", "speedup [95% CI]", "predicted"}, rows);
}

std::size_t max_depth(const std::vector<RunSummary>& summaries) {
  std::size_t depth = 0;
  for (const RunSummary& s : summaries) depth = std::max(depth, s.depth_acceptance.size());
  return depth;
}

std::string per_depth(const std::vector<RunSummary>& summaries) {
  const std::size_t depth = max_depth(summaries);
  Row header = {"run"};
  for (std::size_t d = 1; d <= depth; ++d) header.push_back(std::string("d").append(std::to_string(d)));
  std::vector<Row> rows;
  for (const RunSummary& s : summaries) {
    if (s.domain != "all" || !drafts(s)) continue;
    Row r = {s.run.label};
    for (std::size_t d = 0; d < depth; ++d) {
      r.push_back(d < s.depth_acceptance.size() ? format(s.depth_acceptance[d], "%.3f") : "");
    }
    rows.push_back(std::move(r));
  }
  return markdown_table(header, rows);
}

// Appends `value` to `list` unless present; returns its position.
std::size_t position(std::vector<std::string>& list, const std::string& value) {
  const auto it = std::find(list.begin(), list.end(), value);
  if (it != list.end()) return it - list.begin();
  list.push_back(value);
  return list.size() - 1;
}

// Strategies as rows (every strategy of the runs), drafters as columns, one table per
// variant of the speculative runs; "" with fewer than two strategies.
std::string sampler_comparison(const std::vector<RunSummary>& summaries) {
  std::vector<const RunSummary*> runs;
  std::vector<std::string> strategies, variants;
  std::map<std::string, const RunSummary*> by_id;
  for (const RunSummary& s : summaries) {
    if (s.domain != "all") continue;
    runs.push_back(&s);
    by_id[s.run.id] = &s;
    position(strategies, s.run.strategy);
    if (drafts(s)) position(variants, s.run.variant);
  }
  if (strategies.size() < 2 || variants.empty()) return "";
  // The target alone with `strategy`: the baseline of a speculative run, else a target-only run.
  auto target_only = [&](const std::string& strategy, const std::string& baseline) -> const RunSummary* {
    if (const auto it = by_id.find(baseline); it != by_id.end()) return it->second;
    const auto it = std::find_if(runs.begin(), runs.end(),
                                 [&](const RunSummary* r) { return !drafts(*r) && r->run.strategy == strategy; });
    return it == runs.end() ? nullptr : *it;
  };
  std::string out;
  for (const std::string& variant : variants) {
    std::vector<std::string> drafters;
    std::map<std::pair<std::string, std::size_t>, const RunSummary*> cells;  // (strategy, drafter column)
    for (const RunSummary* s : runs) {
      if (drafts(*s) && s->run.variant == variant) cells[{s->run.strategy, position(drafters, s->run.drafter)}] = s;
    }
    Row header = {"strategy", "target only tok/s"};
    header.insert(header.end(), drafters.begin(), drafters.end());
    std::vector<Row> rows;
    for (const std::string& strategy : strategies) {
      Row row = {strategy};
      std::string baseline;
      for (std::size_t d = 0; d < drafters.size(); ++d) {
        const auto it = cells.find({strategy, d});
        if (it == cells.end()) {
          row.push_back("");
          continue;
        }
        const RunSummary& s = *it->second;
        baseline = s.run.baseline;
        row.push_back(speedup_cell(s.speedup) + " · acc " + format(s.acceptance_rate, "%.2f") + " · τ " + format(s.tau, "%.2f"));
      }
      const RunSummary* alone = target_only(strategy, baseline);
      row.insert(row.begin() + 1, alone ? format(alone->tokens_per_s, "%.1f") : "—");
      rows.push_back(std::move(row));
    }
    out += (variants.size() > 1 ? "### " + variant + "\n\n" : "") + markdown_table(header, rows) + "\n";
  }
  return out;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

struct CsvColumn {
  const char* name;
  std::function<std::string(const RunSummary&)> value;
};

std::string g(double v) { return format(v, "%.6g", ""); }

const std::vector<CsvColumn>& csv_columns() {
  static const std::vector<CsvColumn> columns = {
      {"run_index", [](const RunSummary& s) { return std::to_string(s.run.index); }},
      {"run", [](const RunSummary& s) { return s.run.id; }},
      {"role", [](const RunSummary& s) { return s.run.role; }},
      {"baseline", [](const RunSummary& s) { return s.run.baseline; }},
      {"label", [](const RunSummary& s) { return s.run.label; }},
      {"drafter", [](const RunSummary& s) { return s.run.drafter; }},
      {"shape", [](const RunSummary& s) { return s.run.shape; }},
      {"tree", [](const RunSummary& s) { return s.run.tree; }},
      {"gamma", [](const RunSummary& s) { return std::to_string(s.run.gamma); }},
      {"nodes", [](const RunSummary& s) { return std::to_string(s.run.nodes); }},
      {"variant", [](const RunSummary& s) { return s.run.variant; }},
      {"strategy", [](const RunSummary& s) { return s.run.strategy; }},
      {"domain", [](const RunSummary& s) { return s.domain; }},
      {"lines", [](const RunSummary& s) { return std::to_string(s.lines); }},
      {"pairs", [](const RunSummary& s) { return std::to_string(s.pairs); }},
      {"acceptance_rate", [](const RunSummary& s) { return g(s.acceptance_rate); }},
      {"alpha", [](const RunSummary& s) { return g(s.alpha); }},
      {"tau", [](const RunSummary& s) { return g(s.tau); }},
      {"tokens_per_s", [](const RunSummary& s) { return g(s.tokens_per_s); }},
      {"baseline_tokens_per_s", [](const RunSummary& s) { return g(s.baseline_tokens_per_s); }},
      {"speedup", [](const RunSummary& s) { return g(s.speedup.estimate); }},
      {"speedup_ci_low", [](const RunSummary& s) { return g(s.speedup.low); }},
      {"speedup_ci_high", [](const RunSummary& s) { return g(s.speedup.high); }},
      {"cost_ratio", [](const RunSummary& s) { return g(s.cost_ratio); }},
      {"predicted_speedup", [](const RunSummary& s) { return g(s.predicted_speedup); }},
      {"draft_share", [](const RunSummary& s) { return g(s.draft_share); }},
      {"verify_share", [](const RunSummary& s) { return g(s.verify_share); }},
      {"sample_share", [](const RunSummary& s) { return g(s.sample_share); }},
      {"commit_share", [](const RunSummary& s) { return g(s.commit_share); }},
  };
  return columns;
}

const char* kDefinitions = R"(## How these figures are computed

Sums run over the results lines of a row; rounds are verification steps (stats.steps).

- **acc. rate**: accepted / drafted draft tokens.
- **α** (chains): per-token acceptance under the i.i.d. model of Leviathan et al., by maximum
  likelihood: accepted / (accepted + rounds ending in a rejection), where the rounds
  without a rejection are those whose accepted path reached depth γ.
- **τ**: mean tokens emitted per round (accepted + bonus; mean_accepted_tokens), pooled
  over rounds.
- **acceptance per depth d**: rounds whose accepted path reached depth d / all rounds.
- **tok/s**: mean decode tokens/s of the lines. **speedup**: for each (prompt, seed), the
  mean tokens/s over repetitions divided by the target-alone baseline's (same sampler,
  prompt, seed); the geometric mean of these ratios, with a 95% Student-t interval on
  their logarithms (exp(m ± t₀.₉₇₅,ₙ₋₁ · s/√n)), so the interval covers prompts and seeds.
- **c**: the measured cost ratio, drafting time per drafted token (Σ draft_s / Σ drafted)
  over the time of one target decode step (1 / the baseline's tokens/s).
- **predicted** (chains): Leviathan et al. (2023), Theorem 3.8,
  (1 − α^(γ+1)) / ((1 − α)(γc + 1)), from the measured α and c.
- **time**: shares of the total generation time spent drafting, in the target's
  verification forward, sampling and verifying, and committing the KV cache.
)";

}  // namespace

void write_summary_csv(const std::vector<RunSummary>& summaries, std::ostream& out) {
  std::vector<std::string> axes;
  for (const RunSummary& s : summaries) {
    for (const auto& [axis, value] : s.run.coords.items()) position(axes, axis);
  }
  const std::size_t depth = max_depth(summaries);
  auto write_row = [&](const Row& fields) {
    for (std::size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << csv_field(fields[i]);
    out << "\n";
  };
  Row header;
  for (const CsvColumn& c : csv_columns()) header.push_back(c.name);
  for (const std::string& a : axes) header.push_back("sweep." + a);
  for (std::size_t d = 1; d <= depth; ++d) header.push_back("acc_depth_" + std::to_string(d));
  write_row(header);
  for (const RunSummary& s : summaries) {
    Row row;
    for (const CsvColumn& c : csv_columns()) row.push_back(c.value(s));
    for (const std::string& a : axes) row.push_back(s.run.coords.value(a, ""));
    for (std::size_t d = 0; d < depth; ++d) row.push_back(d < s.depth_acceptance.size() ? g(s.depth_acceptance[d]) : "");
    write_row(row);
  }
}

void write_summary_markdown(const std::vector<RunSummary>& summaries, const std::string& title, const std::string& header,
                            std::ostream& out) {
  out << "# " << (title.empty() ? "Experiment results" : title) << "\n\n" << header << "\n";
  out << "## Overview (all domains)\n\n" << overview(summaries) << "\n";
  out << "## Per domain\n\n" << per_domain(summaries) << "\n";
  if (max_depth(summaries) > 0) out << "## Acceptance per depth (all domains)\n\n" << per_depth(summaries) << "\n";
  const std::string samplers = sampler_comparison(summaries);
  if (!samplers.empty()) {
    out << "## Sampler comparison\n\nSpeedup over the target alone [95% CI] · acceptance rate · τ; "
           "strategies as rows, drafters as columns.\n\n"
        << samplers;
  }
  out << kDefinitions;
}

std::string terminal_tables(const std::vector<RunSummary>& summaries) {
  std::string out = overview(summaries);
  const std::string samplers = sampler_comparison(summaries);
  if (!samplers.empty()) out += "\nSampler comparison (speedup · acceptance rate · τ):\n\n" + samplers;
  return out;
}

}  // namespace specula
