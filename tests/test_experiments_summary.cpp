// Summary statistics against hand-computed values: Student-t quantiles, the speedup
// interval, the median, the seeded bootstrap, conditional acceptance and the accepted-token
// histogram, Leviathan et al.'s formula and the speedup bound, and summarize() over
// hand-written results lines (end-to-end speedups, sampler columns, planted speedups above
// their bound).
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

// One second of decoding after 0.5 s of prefill.
nlohmann::json plain(double tps) {
  return {{"decode_tokens_per_s", tps}, {"target_forwards", 9}, {"drafted", 0}, {"accepted", 0},
          {"new_tokens", tps}, {"decode_s", 1.0}, {"time_s", 1.5}};
}

// `reached[d]`: rounds whose accepted path reached depth d + 1 (the engine reports shares).
// `time`: the decode time (decode_s); time_s adds 0.5 s of prefill, which the time shares
// leave out.
nlohmann::json spec(double tps, int drafted, int accepted, int steps, const std::vector<int>& reached, double tau,
                    double time) {
  std::vector<double> shares;
  for (int r : reached) shares.push_back(static_cast<double>(r) / steps);
  return {{"decode_tokens_per_s", tps}, {"drafted", drafted}, {"accepted", accepted}, {"steps", steps},
          {"target_forwards", steps + 1}, {"accepted_per_depth", shares}, {"mean_accepted_tokens", tau},
          {"new_tokens", tps * time}, {"decode_s", time}, {"time_s", time + 0.5},
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
  // v = Σ verify_forward_s / rounds · baseline tok/s = 0.5 · (1 + 1 + 2 + 2) / 50 · 98.75; the
  // prediction from costs τ / ((Σ draft_s + Σ verify_forward_s) / rounds · baseline tok/s).
  CHECK(all.verify_cost == Approx(3.0 / 50 * 98.75));
  CHECK(all.cost_predicted_speedup == Approx(all.tau / ((0.12 + 3.0) / 50 * 98.75)));
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

TEST_CASE("repetitions are reduced to their median per (prompt, seed) before the ratio", "[experiments]") {
  const RunInfo b = run("base", 0, "", 0), p = run("chain", 1, "base", 1);
  const std::vector<nlohmann::json> lines = {
      line(b, "a", 0, "x", 0, plain(100), 0), line(b, "a", 0, "x", 0, plain(104), 1),
      line(b, "a", 0, "x", 0, plain(200), 2),  // an outlier the median ignores
      line(p, "a", 0, "x", 0, spec(150, 10, 5, 10, {5}, 1.5, 1.0), 0),
      line(p, "a", 0, "x", 0, spec(160, 10, 5, 10, {5}, 1.5, 1.0), 1),
      line(p, "a", 0, "x", 0, spec(155, 10, 5, 10, {5}, 1.5, 1.0), 2),
      line(p, "b", 1, "x", 0, spec(160, 10, 5, 10, {5}, 1.5, 1.0), 0)};  // no baseline for b: not a pair
  const std::vector<RunSummary> s = summarize(lines);
  const RunSummary& all = s[2];
  CHECK(all.lines == 4);
  CHECK(all.units == 2);
  CHECK(all.pairs == 1);
  CHECK(all.speedup.estimate == Approx(155.0 / 104));
  CHECK(all.baseline_tokens_per_s == Approx(104));
  CHECK(s[0].tokens_per_s == Approx(104));
  CHECK(all.tokens_per_s == Approx((155.0 + 160) / 2));  // the mean over (prompt, seed) of the medians
  // End to end: 155 tokens in 1.5 s against 104 in 1.5 s.
  CHECK(all.e2e_speedup.estimate == Approx(155.0 / 104));
  CHECK(all.e2e_tokens_per_s == Approx((155.0 + 160) / 1.5 / 2));
  CHECK(all.alpha == Approx(20.0 / (20 + 20)));  // γ = 1: 20 of 40 rounds accepted, 20 rejected
}

TEST_CASE("the median, conditional acceptance and the accepted-token histogram, by hand", "[experiments]") {
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 3, 2}) == 2.5);
  CHECK(std::isnan(median({})));
  // 10 rounds reaching depth 1..4 in 8, 6, 5, 4 of them.
  const std::vector<double> reached = {8, 6, 5, 4};
  const std::vector<double> conditional = conditional_acceptance(reached, 10);
  REQUIRE(conditional.size() == 4);
  CHECK(conditional[0] == Approx(0.8));
  CHECK(conditional[1] == Approx(0.75));
  CHECK(conditional[2] == Approx(5.0 / 6));
  CHECK(conditional[3] == Approx(0.8));
  const std::vector<double> histogram = accepted_histogram(reached, 10);
  REQUIRE(histogram.size() == 5);  // 0 .. 4 accepted tokens
  const double expected[] = {0.2, 0.2, 0.1, 0.1, 0.4};
  double total = 0, tokens = 0;
  for (std::size_t k = 0; k < 5; ++k) {
    CHECK(histogram[k] == Approx(expected[k]));
    total += histogram[k];
    tokens += k * histogram[k];
  }
  CHECK(total == Approx(1));
  CHECK(tokens == Approx((8 + 6 + 5 + 4) / 10.0));  // the mean accepted tokens: τ - 1
  CHECK(std::isnan(conditional_acceptance({0, 0}, 10)[1]));  // no round reached depth 1
  CHECK(accepted_histogram({}, 0).empty());

  // From the engine's shares: the hand lines' chain reaches depth 1 in 34 and depth 2 in 25 of 50 rounds.
  const RunSummary all = summarize(hand_lines())[3];
  REQUIRE(all.depth_conditional.size() == 2);
  CHECK(all.depth_conditional[0] == Approx(34.0 / 50));
  CHECK(all.depth_conditional[1] == Approx(25.0 / 34));
  REQUIRE(all.accepted_histogram.size() == 3);
  CHECK(all.accepted_histogram[0] == Approx(16.0 / 50));
  CHECK(all.accepted_histogram[1] == Approx(9.0 / 50));
  CHECK(all.accepted_histogram[2] == Approx(25.0 / 50));
}

TEST_CASE("bootstrap intervals are seeded, deterministic and bracket the estimate", "[experiments]") {
  // Two units (1 of 1) and (0 of 1): a resample of two has ratio 0, 1/2 or 1 with chances
  // 1/4, 1/2, 1/4, so the 2.5% and 97.5% quantiles of 2000 resamples are 0 and 1.
  const Interval two = bootstrap_ratio_interval({{1, 1}, {0, 1}});
  CHECK(two.estimate == 0.5);
  CHECK(two.low == 0);
  CHECK(two.high == 1);
  const std::vector<std::pair<double, double>> units = {{14, 20}, {12, 20}, {15, 30}, {18, 30}, {9, 25}, {22, 28}};
  const Interval a = bootstrap_ratio_interval(units), b = bootstrap_ratio_interval(units);
  CHECK(a.estimate == Approx(90.0 / 153));
  CHECK(a.low == b.low);  // the same seed: the same interval, bit for bit
  CHECK(a.high == b.high);
  CHECK(a.low < a.estimate);
  CHECK(a.estimate < a.high);
  CHECK(a.low >= 9.0 / 25);  // within the smallest and largest unit ratio
  CHECK(a.high <= 22.0 / 28);
  const Interval other = bootstrap_ratio_interval(units, 0.95, 2000, 7);
  CHECK((other.low != a.low || other.high != a.high));
  const Interval wider = bootstrap_ratio_interval(units, 0.99);
  CHECK(wider.low <= a.low);
  CHECK(wider.high >= a.high);
  const Interval same = bootstrap_ratio_interval({{3, 4}, {6, 8}, {1.5, 2}});
  CHECK(same.low == Approx(0.75));
  CHECK(same.high == Approx(0.75));
  CHECK(std::isnan(bootstrap_ratio_interval({{1, 2}}).low));

  // In summaries: from kMinPairsForInterval (prompt, seed) units; the hand lines have 4.
  const RunSummary four = summarize(hand_lines())[3];
  CHECK(four.units == 4);
  CHECK(four.tau_interval.estimate == Approx(four.tau));
  CHECK(std::isnan(four.tau_interval.low));
  CHECK(std::isnan(four.acceptance_interval.low));
}

TEST_CASE("summary.csv has one row per summary and summary.md the sections", "[experiments]") {
  const std::vector<RunSummary> s = summarize(hand_lines());
  std::ostringstream csv;
  write_summary_csv(s, csv);
  std::istringstream in(csv.str());
  std::string header, row;
  std::getline(in, header);
  CHECK(header ==
        "run_index,run,role,baseline,label,drafter,shape,tree,gamma,nodes,variant,strategy,sampler,temperature,top_k,"
        "top_p,min_p,beam_width,length_penalty,target,domain,lines,units,pairs,acceptance_rate,acceptance_ci_low,"
        "acceptance_ci_high,alpha,tau,tau_ci_low,tau_ci_high,tokens_per_s,e2e_tokens_per_s,baseline_tokens_per_s,"
        "speedup,speedup_ci_low,speedup_ci_high,e2e_speedup,e2e_speedup_ci_low,e2e_speedup_ci_high,cost_ratio,"
        "predicted_speedup,verify_cost,cost_predicted_speedup,speedup_bound,above_bound,cpu_share,draft_share,"
        "verify_share,sample_share,commit_share,acc_depth_1,acc_depth_2,cond_depth_1,cond_depth_2,accepted_0,accepted_1,accepted_2");
  int rows = 0;
  std::string chain_all;
  while (std::getline(in, row)) {
    if (++rows == 4) chain_all = row;
  }
  CHECK(rows == 6);
  // 4 pairs: no intervals. End to end (0.5 s of prefill each): ratios 1.5, 1.5, 1.32, 1.44;
  // the bound τ / (1 + 0.12 s / 50 rounds · 98.75 tok/s) = 2.18 / 1.237.
  CHECK(chain_all ==
        "1,chain,point,base,draft-4m · γ=2 · greedy,draft-4m,chain,,2,2,γ=2,greedy,,,,,,,,,all,4,4,4,0.59,,,0.702381,"
        "2.18,,,132,95.1,98.75,1.31277,,,1.43807,,,0.1185,1.77504,5.925,0.353781,1.76233,0,,0.02,0.5,0.1,0.05,0.68,0.5,0.68,0.735294,"
        "0.32,0.18,0.5");

  std::ostringstream md;
  write_summary_markdown(s, "Hand", "header line\n", md);
  for (const char* piece : {"# Hand", "header line", "## Overview (all domains)", "## Per domain",
                            "## Acceptance per depth", "P(accept d | reached d − 1)", "## Accepted draft tokens per round",
                            "1.31× (4 pairs, no CI)", "1.44× (4 pairs, no CI)", "(1 − α^(γ+1)) / ((1 − α)(γc + 1))"}) {
    CHECK_THAT(md.str(), Contains(piece));
  }
  CHECK_THAT(md.str(), !Contains("## Sampler comparison"));  // one strategy only
  CHECK_THAT(md.str(), !Contains("× ⚠"));
  CHECK_THAT(md.str(), !Contains("## Above the bound"));
  CHECK(sanity_warnings(s).empty());
}

TEST_CASE("summary.csv names the target and the sampler's parameters where they apply", "[experiments]") {
  const nlohmann::json sampling = {{"strategy", "sample"}, {"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95},
                                   {"min_p", 0.0}, {"beam_width", 4}, {"length_penalty", 1.0}};
  std::vector<nlohmann::json> lines = hand_lines();
  for (nlohmann::json& l : lines) l["settings"] = {{"target", "/models/target-16m"}, {"sampling", sampling}};
  std::ostringstream csv;
  write_summary_csv(summarize(lines), csv);
  const std::string text = csv.str();
  CHECK_THAT(text, Contains(",greedy,sample,0.8,40,0.95,0,,,target-16m,all,"));  // beam's fields stay empty
}

// A baseline at 100 tok/s on prompts p0..p4 (domain x) and q (domain z), and a γ = 2 chain
// with τ = 2 at 130 tok/s on p0..p4 and a planted 1220 tok/s (12.2×) on q.
std::vector<nlohmann::json> planted_lines() {
  const RunInfo b = run("base", 0, "", 0), p = run("chain", 1, "base", 2);
  std::vector<nlohmann::json> lines;
  for (int i = 0; i < 6; ++i) {
    std::string prompt = i < 5 ? "p" : "q";
    if (i < 5) prompt += std::to_string(i);  // ("p" + std::string trips GCC 12's false -Wrestrict, bug 105329)
    const std::string domain = i < 5 ? "x" : "z";
    lines.push_back(line(b, prompt, i, domain, 0, plain(100)));
    lines.push_back(line(p, prompt, i, domain, 0, spec(i < 5 ? 130 : 1220, 20, 10, 10, {6, 4}, 2.0, 1.0)));
    // Two threads that had a CPU for 1.5 of their 2 thread-seconds.
    lines.back()["machine"] = {{"threads", 2}, {"wall_s", 1.0}, {"cpu_s", 1.5}};
  }
  return lines;
}

TEST_CASE("a speedup above what τ and c allow is flagged with its jobs — few pairs give no interval", "[experiments]") {
  const std::vector<RunSummary> s = summarize(planted_lines());
  REQUIRE(s.size() == 6);  // (baseline, chain) × (all, x, z)
  const RunSummary &all = s[3], &x = s[4], &z = s[5];
  // bound = τ / (1 + Σ draft_s / Σ rounds · 100 tok/s) = 2 / (1 + 0.002 · 100)
  CHECK(x.bound == Approx(2 / 1.2));
  CHECK(x.cpu_share == Approx(0.75));
  CHECK(std::isnan(s[0].cpu_share));  // the baseline's lines have no machine record
  CHECK(x.speedup.estimate == Approx(1.3));
  CHECK(!x.above_bound());
  CHECK(x.interval_shown());  // 5 pairs
  CHECK(z.speedup.estimate == Approx(12.2));
  CHECK(!z.interval_shown());
  const std::vector<std::string> suspects = {"chain/q/seed=0/rep=0", "base/q/seed=0/rep=0"};
  CHECK(z.suspect_jobs == suspects);
  CHECK(all.above_bound());  // the geometric mean of five 1.3× and one 12.2× is 1.89×
  CHECK(all.suspect_jobs == suspects);  // the pairs within the bound are not named

  std::ostringstream md;
  write_summary_markdown(s, "", "", md);
  CHECK_THAT(md.str(), Contains("12.20× (1 pair, no CI) ⚠"));
  CHECK_THAT(md.str(), Contains("1.30× [1.30, 1.30]"));
  CHECK_THAT(md.str(), Contains("## Above the bound"));
  const std::string warnings = sanity_warnings(s);
  CHECK_THAT(warnings, Contains("warning: draft-4m · γ=2 · greedy (z): decode speedup 12.20× exceeds the bound 1.67× "
                                "its τ 2.00 and c allow; jobs: chain/q/seed=0/rep=0 base/q/seed=0/rep=0"));
  CHECK_THAT(warnings, Contains("(all): decode speedup 1.89×"));
  CHECK_THAT(warnings, !Contains("(x)"));
  CHECK_THAT(md.str(), Contains(warnings));
  std::ostringstream csv;
  write_summary_csv(s, csv);
  CHECK_THAT(csv.str(), Contains(",1.66667,1,"));  // speedup_bound, above_bound of the flagged rows
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
  lines.push_back(line(g4, "a", 0, "x", 0, spec(130, 10, 5, 5, {3, 2}, 2, 1)));
  lines.push_back(line(g1, "a", 0, "x", 0, spec(120, 10, 5, 5, {3, 2}, 2, 1)));
  lines.push_back(line(h4, "a", 0, "x", 0, spec(100, 10, 4, 5, {3, 1}, 2, 1)));
  lines.push_back(line(h1, "a", 0, "x", 0, spec(92, 10, 4, 5, {3, 1}, 2, 1)));
  lines.push_back(line(beam, "a", 0, "x", 0, plain(70)));
  std::ostringstream md;
  write_summary_markdown(summarize(lines), "", "", md);
  const std::string text = md.str();
  REQUIRE_THAT(text, Contains("## Sampler comparison"));
  const std::string table = text.substr(text.find("## Sampler comparison"));
  CHECK_THAT(table, Contains("| strategy | target only tok/s | draft-4m"));
  CHECK_THAT(table, Contains("| draft-1m"));
  const std::string cell = " (1 pair, no CI) · acc ";
  CHECK_THAT(table, Contains("| greedy   | 100.0             | 1.30×" + cell + "0.50 · τ 2.00 | 1.20×" + cell + "0.50 · τ 2.00 |"));
  CHECK_THAT(table, Contains("| T=1      | 80.0              | 1.25×" + cell + "0.40 · τ 2.00 | 1.15×" + cell + "0.40 · τ 2.00 |"));
  CHECK_THAT(table, Contains("| beam w=4 | 70.0              |                                           |"));
}

}  // namespace
}  // namespace specula
