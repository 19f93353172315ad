// Summary statistics against hand-computed values: Student-t quantiles, the speedup
// interval, Leviathan et al.'s formula, and summarize() over hand-written results lines.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "experiments/plan.h"
#include "experiments/stats.h"
#include "experiments/summary.h"

namespace specula {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("Student-t quantiles match tabulated values", "[experiments]") {
  // scipy.stats.t.ppf(0.975, df)
  const std::pair<int, double> table[] = {{1, 12.706204736432095}, {2, 4.302652729911275}, {3, 3.182446305284263},
                                          {5, 2.5705818366147395}, {10, 2.2281388519649385}, {30, 2.0422724563012373},
                                          {1000, 1.9623390808264074}};
  for (auto [df, t] : table) {
    INFO("df " << df);
    CHECK(student_t_quantile(0.975, df) == Approx(t).epsilon(1e-9));
    CHECK(student_t_quantile(0.025, df) == Approx(-t).epsilon(1e-9));
  }
  CHECK(student_t_quantile(0.5, 4) == Approx(0.0).margin(1e-12));
}

TEST_CASE("geometric mean interval of ratios, by hand", "[experiments]") {
  // logs of 1.2, 1.5, 1.8: mean 0.391858, sd 0.203075; ± t(0.975, 2) · sd / √3
  const Interval i = geometric_mean_interval({1.2, 1.5, 1.8});
  CHECK(i.estimate == Approx(1.479727244598282).epsilon(1e-12));
  CHECK(i.low == Approx(0.8935009397741417).epsilon(1e-9));
  CHECK(i.high == Approx(2.450576849935835).epsilon(1e-9));
  const Interval one = geometric_mean_interval({1.25});
  CHECK(one.estimate == Approx(1.25));
  CHECK(std::isnan(one.low));
  CHECK(std::isnan(geometric_mean_interval({}).estimate));
}

TEST_CASE("Leviathan et al.'s expected tokens and speedup, by hand", "[experiments]") {
  // α = 0.8, γ = 4, c = 0.1: (1 - 0.8^5) / (0.2 · 1.4) = 0.67232 / 0.28
  CHECK(expected_tokens_per_round(0.8, 4) == Approx(3.3616));
  CHECK(leviathan_speedup(0.8, 4, 0.1) == Approx(2.4011428571428572));
  CHECK(leviathan_speedup(1.0, 4, 0.1) == Approx(5 / 1.4));  // the α -> 1 limit, (γ + 1) / (γc + 1)
  CHECK(leviathan_speedup(0.0, 4, 0.1) == Approx(1 / 1.4));
  CHECK(leviathan_speedup(0.5, 1, 0.0) == Approx(1.5));
  CHECK(chain_acceptance_mle(59, 25) == Approx(59.0 / 84));
}

RunInfo run(const std::string& id, int index, const std::string& baseline, int gamma, const std::string& strategy = "greedy") {
  RunInfo r;
  r.id = id;
  r.index = index;
  r.role = baseline.empty() ? "baseline" : "point";
  r.baseline = baseline;
  r.drafter = baseline.empty() ? "none" : "draft-4m";
  r.shape = baseline.empty() ? "none" : "chain";
  r.gamma = gamma;
  r.nodes = gamma;
  r.variant = baseline.empty() ? "" : "γ=" + std::to_string(gamma);
  r.strategy = strategy;
  r.label = (baseline.empty() ? "target only" : "draft-4m · " + r.variant) + " · " + strategy;
  return r;
}

nlohmann::json line(const RunInfo& r, const std::string& prompt, int prompt_index, const std::string& domain, int seed,
                    nlohmann::json stats, int repetition = 0) {
  nlohmann::json l = to_json(r);
  l.update({{"key", r.id + "/" + prompt + "/seed=" + std::to_string(seed) + "/rep=" + std::to_string(repetition)},
            {"prompt_id", prompt}, {"prompt_index", prompt_index}, {"domain", domain}, {"seed", seed},
            {"repetition", repetition}, {"stats", stats}});
  return l;
}

nlohmann::json plain(double tps) {
  return {{"decode_tokens_per_s", tps}, {"target_forwards", 9}, {"drafted", 0}, {"accepted", 0}, {"time_s", 1.0}};
}

// `reached[d]`: rounds whose accepted path reached depth d + 1 (the engine reports shares).
// `time`: the decode time (new_tokens / decode_tokens_per_s); time_s adds 0.5 s of prefill,
// which the time shares leave out.
nlohmann::json spec(double tps, int drafted, int accepted, int steps, const std::vector<int>& reached, double tau,
                    double time) {
  std::vector<double> shares;
  for (int r : reached) shares.push_back(static_cast<double>(r) / steps);
  return {{"decode_tokens_per_s", tps}, {"drafted", drafted}, {"accepted", accepted}, {"steps", steps},
          {"target_forwards", steps + 1}, {"accepted_per_depth", shares}, {"mean_accepted_tokens", tau},
          {"new_tokens", tps * time}, {"time_s", time + 0.5},
          {"time_breakdown", {{"draft_s", 0.02 * time}, {"verify_forward_s", 0.5 * time}, {"sample_verify_s", 0.1 * time},
                              {"commit_s", 0.05 * time}}}};
}

// A γ = 2 chain and its baseline on prompts a (domain x) and b (domain y), seeds 0 and 1.
std::vector<nlohmann::json> hand_lines() {
  const RunInfo b = run("base", 0, "", 0), p = run("chain", 1, "base", 2);
  return {line(b, "a", 0, "x", 0, plain(100)),  line(b, "a", 0, "x", 1, plain(110)),
          line(b, "b", 1, "y", 0, plain(90)),   line(b, "b", 1, "y", 1, plain(95)),
          line(p, "a", 0, "x", 0, spec(150, 20, 14, 10, {8, 6}, 2.4, 1.0)),
          line(p, "a", 0, "x", 1, spec(165, 20, 12, 10, {7, 5}, 2.2, 1.0)),
          line(p, "b", 1, "y", 0, spec(99, 30, 15, 15, {9, 6}, 2.0, 2.0)),
          line(p, "b", 1, "y", 1, spec(114, 30, 18, 15, {10, 8}, 2.2, 2.0))};
}

TEST_CASE("summaries of hand-written results equal hand-computed values", "[experiments]") {
  const std::vector<RunSummary> s = summarize(hand_lines());
  REQUIRE(s.size() == 6);  // (baseline, chain) × (all, x, y)
  CHECK(s[0].run.id == "base");
  CHECK(s[0].domain == "all");
  CHECK(s[1].domain == "x");
  CHECK(s[2].domain == "y");
  CHECK(std::isnan(s[0].acceptance_rate));
  CHECK(std::isnan(s[0].speedup.estimate));
  CHECK(s[0].tokens_per_s == Approx(98.75));

  const RunSummary& all = s[3];
  CHECK(all.run.id == "chain");
  CHECK(all.domain == "all");
  CHECK(all.lines == 4);
  CHECK(all.pairs == 4);
  CHECK(all.acceptance_rate == Approx(59.0 / 100));
  // rounds = Σ steps = 50; rounds accepting all γ = 6 + 5 + 6 + 8 = 25
  CHECK(all.alpha == Approx(59.0 / (59 + 25)));
  CHECK(all.tau == Approx((2.4 * 10 + 2.2 * 10 + 2.0 * 15 + 2.2 * 15) / 50));
  REQUIRE(all.depth_acceptance.size() == 2);
  CHECK(all.depth_acceptance[0] == Approx(34.0 / 50));
  CHECK(all.depth_acceptance[1] == Approx(25.0 / 50));
  CHECK(all.tokens_per_s == Approx(132));
  CHECK(all.baseline_tokens_per_s == Approx(98.75));
  // ratios 1.5, 1.5, 1.1, 1.2: geometric mean with t(0.975, 3) on the logs (scipy)
  CHECK(all.speedup.estimate == Approx(1.3127714172548886));
  CHECK(all.speedup.low == Approx(1.0209515734144954));
  CHECK(all.speedup.high == Approx(1.6880024859531113));
  // c = Σ draft_s / Σ drafted · baseline tokens/s = 0.12 / 100 · 98.75
  CHECK(all.cost_ratio == Approx(0.1185));
  CHECK(all.predicted_speedup == Approx((1 + all.alpha + all.alpha * all.alpha) / (2 * 0.1185 + 1)));
  CHECK(all.predicted_speedup == Approx(1.7750363416722117));
  CHECK(all.draft_share == Approx(0.02));
  CHECK(all.verify_share == Approx(0.5));
  CHECK(all.sample_share == Approx(0.1));
  CHECK(all.commit_share == Approx(0.05));

  const RunSummary& x = s[4];
  CHECK(x.domain == "x");
  CHECK(x.acceptance_rate == Approx(26.0 / 40));
  CHECK(x.alpha == Approx(26.0 / 35));
  CHECK(x.tau == Approx(2.3));
  CHECK(x.depth_acceptance[0] == Approx(15.0 / 20));
  CHECK(x.speedup.estimate == Approx(1.5));
  CHECK(x.speedup.low == Approx(1.5));  // both ratios equal: a zero-width interval
  CHECK(x.cost_ratio == Approx(0.04 / 40 * 105));
  CHECK(x.predicted_speedup == Approx(1.8964412211165458));

  const RunSummary& y = s[5];
  CHECK(y.alpha == Approx(33.0 / 49));
  CHECK(y.speedup.estimate == Approx(1.1489125293076057));
  CHECK(y.speedup.low == Approx(0.661016605992727));
  CHECK(y.speedup.high == Approx(1.9969241136046796));
  CHECK(y.predicted_speedup == Approx(1.7061741208542787));
}

TEST_CASE("repetitions are averaged per (prompt, seed) before the ratio", "[experiments]") {
  const RunInfo b = run("base", 0, "", 0), p = run("chain", 1, "base", 1);
  const std::vector<nlohmann::json> lines = {
      line(b, "a", 0, "x", 0, plain(100), 0), line(b, "a", 0, "x", 0, plain(104), 1),
      line(p, "a", 0, "x", 0, spec(150, 10, 5, 10, {5}, 1.5, 1.0), 0),
      line(p, "a", 0, "x", 0, spec(160, 10, 5, 10, {5}, 1.5, 1.0), 1),
      line(p, "b", 1, "x", 0, spec(160, 10, 5, 10, {5}, 1.5, 1.0), 0)};  // no baseline for b: not a pair
  const std::vector<RunSummary> s = summarize(lines);
  const RunSummary& all = s[2];
  CHECK(all.lines == 3);
  CHECK(all.pairs == 1);
  CHECK(all.speedup.estimate == Approx(155.0 / 102));
  CHECK(all.baseline_tokens_per_s == Approx(102));
  CHECK(all.alpha == Approx(15.0 / (15 + 15)));  // γ = 1: 15 of 30 rounds accepted, 15 rejected
}

TEST_CASE("summary.csv has one row per summary and summary.md the sections", "[experiments]") {
  const std::vector<RunSummary> s = summarize(hand_lines());
  std::ostringstream csv;
  write_summary_csv(s, csv);
  std::istringstream in(csv.str());
  std::string header, row;
  std::getline(in, header);
  CHECK(header.starts_with("run_index,run,role,baseline,label,drafter,shape,tree,gamma,nodes,variant,strategy,domain,"));
  CHECK(header.ends_with(",acc_depth_1,acc_depth_2"));
  int rows = 0;
  std::string chain_all;
  while (std::getline(in, row)) {
    if (++rows == 4) chain_all = row;
  }
  CHECK(rows == 6);
  CHECK(chain_all ==
        "1,chain,point,base,draft-4m · γ=2 · greedy,draft-4m,chain,,2,2,γ=2,greedy,all,4,4,0.59,0.702381,2.18,132,98.75,"
        "1.31277,1.02095,1.688,0.1185,1.77504,0.02,0.5,0.1,0.05,0.68,0.5");

  std::ostringstream md;
  write_summary_markdown(s, "Hand", "header line\n", md);
  for (const char* piece : {"# Hand", "header line", "## Overview (all domains)", "## Per domain",
                            "## Acceptance per depth", "1.31× [1.02, 1.69]", "(1 − α^(γ+1)) / ((1 − α)(γc + 1))"}) {
    CHECK_THAT(md.str(), Contains(piece));
  }
  CHECK_THAT(md.str(), !Contains("## Sampler comparison"));  // one strategy only
}

TEST_CASE("the sampler comparison puts strategies in rows and drafters in columns", "[experiments]") {
  std::vector<nlohmann::json> lines;
  const RunInfo greedy_base = run("gb", 0, "", 0, "greedy"), hot_base = run("hb", 3, "", 0, "T=1");
  const RunInfo beam = run("beam", 6, "", 0, "beam w=4");  // no speculative form: the target alone only
  RunInfo g4 = run("g4", 1, "gb", 2, "greedy"), g1 = run("g1", 2, "gb", 2, "greedy");
  RunInfo h4 = run("h4", 4, "hb", 2, "T=1"), h1 = run("h1", 5, "hb", 2, "T=1");
  g1.drafter = h1.drafter = "draft-1m";
  lines.push_back(line(greedy_base, "a", 0, "x", 0, plain(100)));
  lines.push_back(line(hot_base, "a", 0, "x", 0, plain(80)));
  lines.push_back(line(g4, "a", 0, "x", 0, spec(200, 10, 5, 5, {3, 2}, 2, 1)));
  lines.push_back(line(g1, "a", 0, "x", 0, spec(150, 10, 5, 5, {3, 2}, 2, 1)));
  lines.push_back(line(h4, "a", 0, "x", 0, spec(120, 10, 4, 5, {3, 1}, 2, 1)));
  lines.push_back(line(h1, "a", 0, "x", 0, spec(100, 10, 4, 5, {3, 1}, 2, 1)));
  lines.push_back(line(beam, "a", 0, "x", 0, plain(70)));
  std::ostringstream md;
  write_summary_markdown(summarize(lines), "", "", md);
  const std::string text = md.str();
  REQUIRE_THAT(text, Contains("## Sampler comparison"));
  const std::string table = text.substr(text.find("## Sampler comparison"));
  CHECK_THAT(table, Contains("| strategy | target only tok/s | draft-4m"));
  CHECK_THAT(table, Contains("| draft-1m"));
  CHECK_THAT(table, Contains("| greedy   | 100.0             | 2.00× · acc 0.50 · τ 2.00 | 1.50× · acc 0.50 · τ 2.00 |"));
  CHECK_THAT(table, Contains("| T=1      | 80.0              | 1.50× · acc 0.40 · τ 2.00 | 1.25× · acc 0.40 · τ 2.00 |"));
  CHECK_THAT(table, Contains("| beam w=4 | 70.0              |                           |                           |"));
}

}  // namespace
}  // namespace specula
