// The writers of summary.csv, summary.md and the terminal tables (see summary.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "experiments/summary.h"

namespace specula {

using Row = std::vector<std::string>;

std::string format(double v, const char* spec, const char* missing) {
  if (!std::isfinite(v)) return missing;
  char out[64];
  std::snprintf(out, sizeof out, spec, v);
  return out;
}

namespace {

std::size_t display_width(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

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

namespace {

// "1.31× [1.02, 1.69]"; "1.31× (3 pairs, no CI)" below kMinPairsForInterval pairs; "⚠" after
// the decode speedup when it exceeds the bound τ and c allow.
std::string speedup_cell(const Interval& speedup, const RunSummary& s) {
  if (!std::isfinite(speedup.estimate)) return "—";
  std::string out = format(speedup.estimate, "%.2f×");
  if (!s.interval_shown()) {
    out += " (" + std::to_string(s.pairs) + (s.pairs == 1 ? " pair" : " pairs") + ", no CI)";
  } else if (std::isfinite(speedup.low)) {
    out += " [" + format(speedup.low, "%.2f") + ", " + format(speedup.high, "%.2f") + "]";
  }
  if (&speedup == &s.speedup && s.above_bound()) out += " ⚠";
  return out;
}

// A figure with its bootstrap interval when there is one: "2.18 [2.01, 2.35]".
std::string with_interval(const Interval& i, const char* spec) {
  std::string out = format(i.estimate, spec);
  if (std::isfinite(i.low)) out += " [" + format(i.low, spec) + ", " + format(i.high, spec) + "]";
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


bool drafts(const RunSummary& s) { return s.run.shape != "none"; }

std::string overview(const std::vector<RunSummary>& summaries) {
  std::vector<Row> rows;
  for (const RunSummary& s : summaries) {
    if (s.domain != "all") continue;
    rows.push_back({s.run.label, std::to_string(s.lines), with_interval(s.acceptance_interval, "%.3f"),
                    with_interval(s.tau_interval, "%.2f"), format(s.tokens_per_s, "%.1f"), speedup_cell(s.speedup, s),
                    speedup_cell(s.e2e_speedup, s), format(s.predicted_speedup, "%.2f×"),
                    format(s.cost_predicted_speedup, "%.2f×"), format(s.bound, "%.2f×"), format(s.cost_ratio, "%.3f"),
                    format(s.verify_cost, "%.2f"), format(s.cpu_share, "%.2f"), time_cell(s)});
  }
  return markdown_table({"run", "n", "acc. rate", "τ", "decode tok/s", "speedup decode", "speedup end-to-end",
                         "predicted", "predicted from costs", "bound", "c", "v", "CPU share",
                         "decode time: draft / verify / sample / commit"},
                        rows);
}

std::string per_domain(const std::vector<RunSummary>& summaries) {
  std::vector<Row> rows;
  for (const RunSummary& s : summaries) {
    rows.push_back({s.run.label, s.domain, std::to_string(s.lines), with_interval(s.acceptance_interval, "%.3f"),
                    format(s.alpha, "%.3f"), with_interval(s.tau_interval, "%.2f"), format(s.tokens_per_s, "%.1f"),
                    speedup_cell(s.speedup, s), speedup_cell(s.e2e_speedup, s), format(s.predicted_speedup, "%.2f×"),
                    format(s.bound, "%.2f×")});
  }
  return markdown_table({"run", "domain", "n", "acc. rate", "α", "τ", "decode tok/s", "speedup decode",
                         "speedup end-to-end", "predicted", "bound"},
                        rows);
}

std::size_t max_depth(const std::vector<RunSummary>& summaries) {
  std::size_t depth = 0;
  for (const RunSummary& s : summaries) depth = std::max(depth, s.depth_acceptance.size());
  return depth;
}

// One row per speculative run (all domains) of `values(s)`, columns `prefix`<first>..;
// `first` is 1 for depths and 0 for accepted-token counts.
std::string per_depth(const std::vector<RunSummary>& summaries, const std::vector<double> RunSummary::*values,
                      const std::string& prefix, std::size_t first) {
  std::size_t columns = 0;
  for (const RunSummary& s : summaries) columns = std::max(columns, (s.*values).size());
  Row header = {"run"};
  for (std::size_t c = 0; c < columns; ++c) header.push_back(prefix + std::to_string(c + first));
  std::vector<Row> rows;
  for (const RunSummary& s : summaries) {
    if (s.domain != "all" || !drafts(s)) continue;
    Row r = {s.run.label};
    for (std::size_t c = 0; c < columns; ++c) r.push_back(c < (s.*values).size() ? format((s.*values)[c], "%.3f") : "");
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
        row.push_back(speedup_cell(s.speedup, s) + " · acc " + format(s.acceptance_rate, "%.2f") + " · τ " + format(s.tau, "%.2f"));
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

// A sampling parameter of the run's settings, "" for the strategies it does not apply to;
// greedy decoding is temperature 0.
std::string sampler_field(const RunSummary& s, const char* key) {
  const nlohmann::json sampling = s.settings.value("sampling", nlohmann::json::object());
  const std::string strategy = sampling.value("strategy", "");
  const std::string k = key;
  if (k == "temperature" && strategy == "greedy") return "0";
  const bool applies = strategy == "sample" ? (k == "temperature" || k == "top_k" || k == "top_p" || k == "min_p")
                                            : strategy == "beam" && (k == "beam_width" || k == "length_penalty");
  if (!applies || !sampling.contains(k)) return "";
  return sampling[k].is_number_integer() ? std::to_string(sampling[k].get<long>()) : g(sampling[k].get<double>());
}

std::string target_name(const RunSummary& s) {
  return std::filesystem::path(s.settings.value("target", "")).filename().string();
}

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
      {"sampler", [](const RunSummary& s) { return s.settings.value("sampling", nlohmann::json::object()).value("strategy", ""); }},
      {"temperature", [](const RunSummary& s) { return sampler_field(s, "temperature"); }},
      {"top_k", [](const RunSummary& s) { return sampler_field(s, "top_k"); }},
      {"top_p", [](const RunSummary& s) { return sampler_field(s, "top_p"); }},
      {"min_p", [](const RunSummary& s) { return sampler_field(s, "min_p"); }},
      {"beam_width", [](const RunSummary& s) { return sampler_field(s, "beam_width"); }},
      {"length_penalty", [](const RunSummary& s) { return sampler_field(s, "length_penalty"); }},
      {"target", target_name},
      {"domain", [](const RunSummary& s) { return s.domain; }},
      {"lines", [](const RunSummary& s) { return std::to_string(s.lines); }},
      {"units", [](const RunSummary& s) { return std::to_string(s.units); }},
      {"pairs", [](const RunSummary& s) { return std::to_string(s.pairs); }},
      {"acceptance_rate", [](const RunSummary& s) { return g(s.acceptance_rate); }},
      {"acceptance_ci_low", [](const RunSummary& s) { return g(s.acceptance_interval.low); }},
      {"acceptance_ci_high", [](const RunSummary& s) { return g(s.acceptance_interval.high); }},
      {"alpha", [](const RunSummary& s) { return g(s.alpha); }},
      {"tau", [](const RunSummary& s) { return g(s.tau); }},
      {"tau_ci_low", [](const RunSummary& s) { return g(s.tau_interval.low); }},
      {"tau_ci_high", [](const RunSummary& s) { return g(s.tau_interval.high); }},
      {"tokens_per_s", [](const RunSummary& s) { return g(s.tokens_per_s); }},
      {"e2e_tokens_per_s", [](const RunSummary& s) { return g(s.e2e_tokens_per_s); }},
      {"baseline_tokens_per_s", [](const RunSummary& s) { return g(s.baseline_tokens_per_s); }},
      {"speedup", [](const RunSummary& s) { return g(s.speedup.estimate); }},
      {"speedup_ci_low", [](const RunSummary& s) { return s.interval_shown() ? g(s.speedup.low) : ""; }},
      {"speedup_ci_high", [](const RunSummary& s) { return s.interval_shown() ? g(s.speedup.high) : ""; }},
      {"e2e_speedup", [](const RunSummary& s) { return g(s.e2e_speedup.estimate); }},
      {"e2e_speedup_ci_low", [](const RunSummary& s) { return s.interval_shown() ? g(s.e2e_speedup.low) : ""; }},
      {"e2e_speedup_ci_high", [](const RunSummary& s) { return s.interval_shown() ? g(s.e2e_speedup.high) : ""; }},
      {"cost_ratio", [](const RunSummary& s) { return g(s.cost_ratio); }},
      {"predicted_speedup", [](const RunSummary& s) { return g(s.predicted_speedup); }},
      {"verify_cost", [](const RunSummary& s) { return g(s.verify_cost); }},
      {"cost_predicted_speedup", [](const RunSummary& s) { return g(s.cost_predicted_speedup); }},
      {"speedup_bound", [](const RunSummary& s) { return g(s.bound); }},
      {"above_bound", [](const RunSummary& s) { return std::string(s.above_bound() ? "1" : "0"); }},
      {"cpu_share", [](const RunSummary& s) { return g(s.cpu_share); }},
      {"draft_share", [](const RunSummary& s) { return g(s.draft_share); }},
      {"verify_share", [](const RunSummary& s) { return g(s.verify_share); }},
      {"sample_share", [](const RunSummary& s) { return g(s.sample_share); }},
      {"commit_share", [](const RunSummary& s) { return g(s.commit_share); }},
  };
  return columns;
}

const char* kDefinitions = R"(## How these figures are computed

Sums run over the results lines of a row; rounds are verification steps (stats.steps); a
pair is one (prompt, seed), whose repetitions are reduced to their median tokens/s.

- **acc. rate**: accepted / drafted draft tokens, with a 95% percentile bootstrap interval
  (2000 resamples of the row's pairs, seeded: the same results give the same interval).
- **α** (chains): per-token acceptance under the i.i.d. model of Leviathan et al., by maximum
  likelihood: accepted / (accepted + rounds ending in a rejection), where the rounds
  without a rejection are those whose accepted path reached depth γ.
- **τ**: mean tokens emitted per round (accepted + bonus; mean_accepted_tokens), pooled
  over rounds, with its bootstrap interval like the acceptance rate's.
- **acceptance per depth d**: rounds whose accepted path reached depth d / all rounds;
  **given d − 1**: rounds that reached depth d / rounds that reached depth d − 1.
- **accepted draft tokens per round k**: share of the rounds whose accepted path has exactly
  k tokens (from the same counts: reached k − reached k + 1).
- **decode tok/s**: the mean over pairs of the median decode tokens/s (the target alone: one
  decode step per token; prefill left out).
- **speedup decode**: for each pair, the median decode tokens/s over repetitions divided by
  the target-alone baseline's (same sampler, prompt, seed); the geometric mean of these
  ratios, with a 95% Student-t interval on their logarithms (exp(m ± t₀.₉₇₅,ₙ₋₁ · s/√n)), so
  the interval covers prompts and seeds. Rows with fewer than 5 pairs give no interval.
- **speedup end-to-end**: the same of new_tokens / time_s, whose time includes the prefill
  of the target and of the draft model (what Spec-Bench reports).
- **c**: the measured cost ratio, drafting time per drafted token (Σ draft_s / Σ drafted)
  over the time of one target decode step (1 / the baseline's tokens/s).
- **predicted** (chains): Leviathan et al. (2023), Theorem 3.8,
  (1 − α^(γ+1)) / ((1 − α)(γc + 1)), from the measured α and c.
- **v**: the measured cost of a verify pass, the target's forward over a round's rows
  (Σ verify_forward_s / Σ rounds), over the time of one target decode step; 1 is the classic
  prediction's assumption, above 1 where a pass of γ + 1 rows costs more than one of 1 row.
- **predicted from costs**: τ / ((Σ draft_s + Σ verify_forward_s) / Σ rounds · baseline
  tok/s), the measured tokens per round at the measured cost of a round's drafting and
  verify pass, in target decode steps. Beside **predicted** it says whether a run lost by
  acceptance (both low) or by cost (predicted high, this low); the measured speedup falls
  below it by the rest of a round (sampling, verification, commits, the scheduler).
- **bound**: the most a run emitting τ tokens per round can gain when a round costs at
  least its drafting and one target decode step: τ / (1 + (Σ draft_s / Σ rounds) · baseline
  tok/s), Leviathan's τ / (γc + 1) for a chain; a decode speedup above it (⚠) is a timing
  artefact. (The end-to-end speedup is not held to it: the prefill, the same in both runs,
  pulls that ratio towards 1.)
- **CPU share**: CPU seconds of the jobs / (their wall seconds × threads), from each results
  line's machine record: 1.00 when every thread had a core to itself; lower when other work
  took the CPU during the jobs, whose timings then say more about that work than about the run.
- **time**: shares of the decode time spent drafting, in the target's verification
  forward, sampling and verifying, and committing the KV cache.
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
  const std::pair<const char*, const std::vector<double> RunSummary::*> lists[] = {
      {"acc_depth_", &RunSummary::depth_acceptance},
      {"cond_depth_", &RunSummary::depth_conditional},
      {"accepted_", &RunSummary::accepted_histogram}};
  for (const auto& [prefix, values] : lists) {
    const bool histogram = values == &RunSummary::accepted_histogram;  // 0 .. depth accepted tokens
    for (std::size_t d = histogram ? 0 : 1; d <= depth; ++d) header.push_back(prefix + std::to_string(d));
  }
  write_row(header);
  for (const RunSummary& s : summaries) {
    Row row;
    for (const CsvColumn& c : csv_columns()) row.push_back(c.value(s));
    for (const std::string& a : axes) row.push_back(s.run.coords.value(a, ""));
    for (const auto& [prefix, values] : lists) {
      const std::vector<double>& v = s.*values;
      const std::size_t columns = values == &RunSummary::accepted_histogram ? depth + 1 : depth;
      for (std::size_t d = 0; d < columns; ++d) row.push_back(d < v.size() ? g(v[d]) : "");
    }
    write_row(row);
  }
}

void write_summary_markdown(const std::vector<RunSummary>& summaries, const std::string& title, const std::string& header,
                            std::ostream& out) {
  out << "# " << (title.empty() ? "Experiment results" : title) << "\n\n" << header << "\n";
  out << "## Overview (all domains)\n\n" << overview(summaries) << "\n";
  out << "## Per domain\n\n" << per_domain(summaries) << "\n";
  if (max_depth(summaries) > 0) {
    out << "## Acceptance per depth (all domains)\n\nRounds whose accepted path reached depth d, of all rounds:\n\n"
        << per_depth(summaries, &RunSummary::depth_acceptance, "d", 1)
        << "\nGiven that it reached depth d − 1, P(accept d | reached d − 1):\n\n"
        << per_depth(summaries, &RunSummary::depth_conditional, "d", 1)
        << "\n## Accepted draft tokens per round (all domains)\n\nShare of the rounds that accepted exactly k draft "
           "tokens:\n\n"
        << per_depth(summaries, &RunSummary::accepted_histogram, "k=", 0) << "\n";
  }
  const std::string samplers = sampler_comparison(summaries);
  if (!samplers.empty()) {
    out << "## Sampler comparison\n\nSpeedup over the target alone [95% CI] · acceptance rate · τ; "
           "strategies as rows, drafters as columns.\n\n"
        << samplers;
  }
  const std::string warnings = sanity_warnings(summaries);
  if (!warnings.empty()) {
    out << "## Above the bound\n\nThese cells measured a decode speedup their τ and c do not allow (⚠ in the tables): a "
           "timing disturbed by other work, most often the baseline's. Their jobs, to rerun (delete their lines from "
           "results.jsonl and rerun the config):\n\n```\n"
        << warnings << "```\n\n";
  }
  out << kDefinitions;
}

std::string sanity_warnings(const std::vector<RunSummary>& summaries) {
  std::string out;
  for (const RunSummary& s : summaries) {
    if (!s.above_bound()) continue;
    out += "warning: " + s.run.label + " (" + s.domain + "): decode speedup " + format(s.speedup.estimate, "%.2f×") +
           " exceeds the bound " + format(s.bound, "%.2f×") + " its τ " + format(s.tau, "%.2f") + " and c allow; jobs:";
    for (const std::string& key : s.suspect_jobs) out += " " + key;
    out += "\n";
  }
  return out;
}

std::string terminal_tables(const std::vector<RunSummary>& summaries) {
  std::string out = overview(summaries);
  const std::string samplers = sampler_comparison(summaries);
  if (!samplers.empty()) out += "\nSampler comparison (speedup · acceptance rate · τ):\n\n" + samplers;
  return out;
}

}  // namespace specula
