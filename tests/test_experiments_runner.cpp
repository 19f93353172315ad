// The runner end to end with a fake backend: output files, summaries equal to a
// recomputation from results.jsonl, the timing protocol (warm-ups, alternated order, the
// machine record of every line), resume after a crash (cut line, SIGKILL) or an interrupt
// (SIGINT) without loss or duplicates, dry runs, refusals before anything runs, and the
// plots of 1, 10 and 40 series.
#include <algorithm>
#include <cmath>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <sstream>
#include <sys/wait.h>

#include "experiments/arrivals.h"
#include "experiments/batch_summary.h"
#include "experiments/config.h"
#include "experiments/interrupt.h"
#include "experiments/machine.h"
#include "experiments/plan.h"
#include "experiments/results.h"
#include "experiments/runner.h"
#include "tests/test_experiments_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using test::FakeBackend;
using test::ScratchDir;
using test::tiny_config;

// Every line of a results file, as read_results streams them by.
std::vector<nlohmann::json> read_lines(const fs::path& path, ResultsRead* read = nullptr) {
  std::vector<nlohmann::json> lines;
  const ResultsRead r = read_results(path.string(), [&](const nlohmann::json& line, std::uint32_t ordinal) {
    CHECK(ordinal == lines.size());
    lines.push_back(line);
  });
  CHECK(r.lines == lines.size());
  if (read) *read = r;
  return lines;
}

// The row of summary.csv with this label and domain, as column -> field (no quoted fields).
std::map<std::string, std::string> csv_row(const std::string& csv, const std::string& label, const std::string& domain) {
  std::istringstream in(csv);
  auto fields = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream s(line);
    for (std::string f; std::getline(s, f, ',');) out.push_back(f);
    if (!line.empty() && line.back() == ',') out.push_back("");
    return out;
  };
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = fields(line);
  while (std::getline(in, line)) {
    std::map<std::string, std::string> row;
    const std::vector<std::string> f = fields(line);
    for (std::size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    if (row["label"] == label && row["domain"] == domain) return row;
  }
  FAIL("no row " << label << " / " << domain);
  return {};
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// tiny_config writing into <scratch>/out: 4 runs × 3 prompts × 2 seeds × 3 repetitions (the
// default) = 72 jobs, and one warm-up generation per run.
struct TinyExperiment {
  ScratchDir scratch;
  std::string config = scratch.write("tiny.toml", tiny_config());
  fs::path out = scratch.path() / "out";
  RunOptions options{out.string(), false, true, {}};
  static constexpr int kJobs = 72;
  static constexpr int kRuns = 4;

  int run(FakeBackend& backend, std::string* printed = nullptr) {
    std::ostringstream out_stream, log;
    const int status = run_experiment(config, backend, options, out_stream, log);
    if (printed) *printed = out_stream.str() + log.str();
    return status;
  }
  std::vector<nlohmann::json> lines() const { return read_lines(out / "results.jsonl"); }
};

void require_complete(const std::vector<nlohmann::json>& lines, const std::string& config) {
  const Plan plan = make_plan(load_config(config));
  std::multiset<std::string> keys;
  for (const nlohmann::json& l : lines) keys.insert(l.at("key").get<std::string>());
  REQUIRE(keys.size() == plan.jobs.size());
  for (const Job& j : plan.jobs) CHECK(keys.count(j.key) == 1);
}

TEST_CASE("a tiny sweep runs end to end and its summaries equal a recomputation", "[experiments]") {
  TinyExperiment e;
  FakeBackend backend;
  std::string printed;
  REQUIRE(e.run(backend, &printed) == 0);
  CHECK(backend.generate_calls == TinyExperiment::kJobs + TinyExperiment::kRuns);
  require_complete(e.lines(), e.config);
  for (const char* file : {"config.toml", "config.resolved.toml", "experiment.json", "results.jsonl", "summary.csv", "summary.md"}) {
    CHECK(fs::is_regular_file(e.out / file));
  }
  CHECK(read_text(e.out / "config.toml") == read_text(e.config));
  CHECK_THAT(printed, Contains("| draft-4m · γ=4 · greedy |"));
  CHECK_THAT(printed, Contains("| target only · greedy"));

  const nlohmann::json record = nlohmann::json::parse(read_text(e.out / "experiment.json"));
  CHECK(record["title"] == "tiny");
  REQUIRE(record["sessions"].size() == 1);
  CHECK(record["sessions"][0]["machine"]["gpu"] == "none");
  CHECK(record["sessions"][0]["machine"]["cpu"] == cpu_model());
  CHECK(record["sessions"][0]["version"] == specula_version());

  const nlohmann::json first = e.lines().front();
  for (const char* field : {"key", "run", "label", "role", "baseline", "prompt_id", "domain", "seed", "repetition",
                            "settings", "ids", "text", "stats"}) {
    CHECK(first.contains(field));
  }
  CHECK(first["settings"]["draft"]["method"] == "none");

  // The fake's draft-4m accepts depth d in floor(10 · 0.8^d) of 10 rounds: 8, 6, 5, 4.
  const std::string csv = read_text(e.out / "summary.csv");
  const std::map<std::string, std::string> row = csv_row(csv, "draft-4m · γ=4 · greedy", "all");
  CHECK(row.at("lines") == "18");
  CHECK(row.at("units") == "6");
  CHECK(row.at("pairs") == "6");
  CHECK(row.at("acceptance_rate") == "0.575");
  CHECK(row.at("tau") == "3.3");
  CHECK(row.at("sampler") == "greedy");
  CHECK(row.at("temperature") == "0");
  CHECK(row.at("top_k").empty());
  CHECK(row.at("target") == "target-16m");
  CHECK(row.at("above_bound") == "0");
  CHECK(row.at("accepted_0") == "0.2");  // 2 of 10 rounds accept nothing, ..., 4 accept all 4
  CHECK(row.at("accepted_4") == "0.4");
  CHECK(row.at("cond_depth_2") == "0.75");  // 6 of the 8 rounds that reached depth 1
  CHECK_THAT(csv.substr(0, csv.find('\n')), Contains(",commit_share,sweep.draft.gamma,acc_depth_1,"));

  const std::string md = read_text(e.out / "summary.md");
  fs::remove(e.out / "summary.csv");
  fs::remove(e.out / "summary.md");
  std::ostringstream out, log;
  REQUIRE(report_experiment(e.out.string(), out, log) == 0);
  CHECK(read_text(e.out / "summary.csv") == csv);
  CHECK(read_text(e.out / "summary.md") == md);
}

TEST_CASE("a rerun after a crash mid-line drops the cut line and redoes only what is missing", "[experiments]") {
  TinyExperiment e;
  FakeBackend first;
  e.run(first);
  const std::string full = read_text(e.out / "results.jsonl");
  // Keep 10 complete lines and half of the 11th.
  std::size_t cut = 0;
  for (int i = 0; i < 10; ++i) cut = full.find('\n', cut) + 1;
  const std::size_t next_end = full.find('\n', cut);
  fs::resize_file(e.out / "results.jsonl", cut + (next_end - cut) / 2);

  FakeBackend second;
  std::string printed;
  e.options.quiet = false;
  e.run(second, &printed);
  CHECK(second.generate_calls == TinyExperiment::kJobs - 10 + TinyExperiment::kRuns);  // every run has jobs left
  CHECK_THAT(printed, Contains("dropped a last line cut short by a crash"));
  CHECK_THAT(printed, Contains("[62/62] "));
  const std::string resumed = read_text(e.out / "results.jsonl");
  CHECK(resumed.substr(0, cut) == full.substr(0, cut));
  require_complete(e.lines(), e.config);

  FakeBackend third;  // nothing left to do
  e.run(third);
  CHECK(third.generate_calls == 0);
  CHECK(read_text(e.out / "results.jsonl") == resumed);
  CHECK(nlohmann::json::parse(read_text(e.out / "experiment.json"))["sessions"].size() == 3);
}

// Runs `e` in a child process whose backend SIGKILLs it on generate call `kill_on_call`.
void run_until_killed(TinyExperiment& e, int kill_on_call) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    FakeBackend dying;
    dying.kill_on_call = kill_on_call;
    try {
      e.run(dying);
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("a run killed with SIGKILL resumes without loss or duplicates", "[experiments]") {
  TinyExperiment e;
  run_until_killed(e, 12);  // 4 warm-ups and 7 lines, then the process dies in generate()
  CHECK(e.lines().size() == 7);

  FakeBackend resumed;
  e.run(resumed);
  CHECK(resumed.generate_calls == TinyExperiment::kJobs - 7 + TinyExperiment::kRuns);
  require_complete(e.lines(), e.config);
}

TEST_CASE("every results line records the machine, the build, the threads and the load", "[experiments]") {
  TinyExperiment e;
  std::string text = tiny_config();
  text.insert(text.find("[output]"), "threads = 1\n");
  e.config = e.scratch.write("tiny.toml", text);
  FakeBackend backend;
  REQUIRE(e.run(backend) == 0);
  const std::vector<nlohmann::json> lines = e.lines();
  REQUIRE(lines.size() == TinyExperiment::kJobs);
  for (const nlohmann::json& l : lines) {
    const nlohmann::json& m = l.at("machine");
    CHECK(m.at("cpu") == cpu_model());
    CHECK(m.at("isa") == matmul_isa_name());
    CHECK((m.at("isa") == "avx2" || m.at("isa") == "avx512"));
    CHECK(m.at("compiler") == compiler_name());
    CHECK(m.at("build_type") == build_type());
    CHECK(m.at("version") == specula_version());
    CHECK(m.at("threads") == 1);
    REQUIRE(m.at("load_average").size() == 3);
    CHECK(m.at("load_average")[0].get<double>() >= 0);
    CHECK(m.at("wall_s").get<double>() >= 0);  // the job's wall and CPU seconds
    CHECK(m.at("cpu_s").get<double>() >= 0);
  }
  CHECK_THAT(compiler_name(), Contains("gcc") || Contains("clang"));
  // The first prompt and seed: each run once per repetition, reversed on the odd one.
  std::vector<std::pair<int, int>> order;  // (run index, repetition)
  for (std::size_t i = 0; i < 12; ++i) order.emplace_back(lines[i].at("run_index"), lines[i].at("repetition"));
  CHECK(order == std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {3, 1}, {2, 1},
                                                  {1, 1}, {0, 1}, {0, 2}, {1, 2}, {2, 2}, {3, 2}});
}

// summary.csv without its cpu_share column, the one that depends on when the jobs ran.
std::string without_cpu_share(const std::string& csv) {
  std::istringstream in(csv);
  std::string out, line;
  std::size_t column = std::string::npos;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream s(line);
    for (std::string f; std::getline(s, f, ',');) fields.push_back(f);
    if (column == std::string::npos) column = std::find(fields.begin(), fields.end(), "cpu_share") - fields.begin();
    if (column < fields.size()) fields.erase(fields.begin() + static_cast<long>(column));
    for (const std::string& f : fields) out += f + ",";
    out += "\n";
  }
  return out;
}

// A results line without what depends on when and where it ran.
nlohmann::json without_machine(nlohmann::json line) {
  line.erase("machine");
  return line;
}

TEST_CASE("SIGINT stops the run between jobs with exit 130, and a rerun gives the uninterrupted results",
          "[experiments]") {
  TinyExperiment whole;
  FakeBackend uninterrupted;
  REQUIRE(whole.run(uninterrupted) == 0);

  TinyExperiment e;
  std::string printed;
  {
    const InterruptGuard guard;
    FakeBackend interrupted_backend;
    interrupted_backend.interrupt_on_call = 12;  // 4 warm-ups, 7 jobs, and SIGINT during the 8th
    CHECK(e.run(interrupted_backend, &printed) == kInterruptedExit);
    CHECK(interrupted_backend.generate_calls == 12);
  }
  CHECK_THAT(printed, Contains("interrupted after 8 of 72 jobs; rerun the same command to resume"));
  CHECK(e.lines().size() == 8);  // the 8th job finished and its line is whole
  ResultsRead partial;
  read_lines(e.out / "results.jsonl", &partial);
  CHECK(!partial.cut_line);

  FakeBackend resumed;
  REQUIRE(e.run(resumed) == 0);
  CHECK(resumed.generate_calls == TinyExperiment::kJobs - 8 + TinyExperiment::kRuns);
  const std::vector<nlohmann::json> a = whole.lines(), b = e.lines();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(without_machine(a[i]) == without_machine(b[i]));
  CHECK(without_cpu_share(read_text(whole.out / "summary.csv")) == without_cpu_share(read_text(e.out / "summary.csv")));
}

TEST_CASE("a dry run validates and prints the runs, and runs nothing", "[experiments]") {
  TinyExperiment e;
  e.options.dry_run = true;
  FakeBackend backend;
  std::string printed;
  REQUIRE(e.run(backend, &printed) == 0);
  CHECK(backend.generate_calls == 0);
  CHECK(!fs::exists(e.out));
  CHECK_THAT(printed, Contains("sweep: draft.gamma (3) = 3 points, 4 distinct runs with baselines"));
  CHECK_THAT(printed, Contains("prompts: 3 (x 2, y 1), seeds [0,1], repetitions 3"));
  CHECK_THAT(printed, Contains("#0 baseline target only · greedy"));
  CHECK_THAT(printed, Contains("#3 point draft-4m · γ=4 · greedy"));
  CHECK_THAT(printed, Contains("jobs: 72, 0 already in results.jsonl, 72 to run"));
}

TEST_CASE("nothing runs when the backend refuses a run or the directory holds another config", "[experiments]") {
  TinyExperiment e;
  FakeBackend refusing;
  refusing.reject_gamma = 2;
  CHECK_THROWS_WITH(e.run(refusing), Contains("run 'draft-4m · γ=2 · greedy' cannot run: gamma 2 unsupported"));
  CHECK(refusing.generate_calls == 0);
  CHECK(!fs::exists(e.out));

  FakeBackend backend;
  e.run(backend);
  e.config = e.scratch.write("other.toml", tiny_config().substr(0, tiny_config().find("[sweep]")));
  FakeBackend other;
  CHECK_THROWS_WITH(e.run(other), Contains("holds results of another config"));
  CHECK(other.generate_calls == 0);
}

TEST_CASE("a results file with a corrupt complete line is refused, naming the line", "[experiments]") {
  ScratchDir dir;
  TinyExperiment e;
  FakeBackend backend;
  e.run(backend);
  const std::string good = e.lines().front().dump();  // a line as the runner writes it
  const std::string path = dir.write("results.jsonl", good + "\nnot json\n" + good + "\n");
  CHECK_THROWS_WITH(read_lines(path), Contains(path + ":2: not a JSON object"));
  ResultsRead cut;
  CHECK(read_lines(dir.write("cut.jsonl", good + "\n{\"key\""), &cut).size() == 1);
  CHECK(cut.lines == 1);
  CHECK(cut.cut_line);
  CHECK(cut.complete_bytes == good.size() + 1);
  // A line of the wrong shape names the line and the field, for resuming and `specula report`.
  nlohmann::json wrong = e.lines().front();
  wrong.erase("run");
  CHECK_THROWS_WITH(read_lines(dir.write("shape.jsonl", good + "\n" + wrong.dump() + "\n")),
                    Contains("shape.jsonl:2: results line without 'run'"));
  wrong = e.lines().front();
  wrong["stats"] = "fast";
  CHECK_THROWS_WITH(read_lines(dir.write("type.jsonl", wrong.dump() + "\n")),
                    Contains("type.jsonl:1: results line field 'stats' = \"fast\" has the wrong type"));
  // A count the summaries read as an int is refused out of an int's range (a float as large
  // would not convert).
  wrong = e.lines().front();
  wrong["machine"]["threads"] = 1e300;
  CHECK_THROWS_WITH(read_lines(dir.write("threads.jsonl", wrong.dump() + "\n")),
                    Contains("threads.jsonl:1: results line machine.threads = 1e+300 must be a whole number"));
  // The list-valued sampling settings read back; a list of the wrong elements is refused.
  nlohmann::json lists = e.lines().front();
  lists["settings"]["sampling"].update(nlohmann::json::parse(
      R"({"logit_bias": [[3, -1.5]], "banned_tokens": [11], "stop_strings": ["\n\n"]})"));
  CHECK(read_lines(dir.write("lists.jsonl", lists.dump() + "\n")).size() == 1);
  lists["settings"]["sampling"]["stop_strings"] = {1};
  CHECK_THROWS_WITH(read_lines(dir.write("lists2.jsonl", lists.dump() + "\n")),
                    Contains("lists2.jsonl:1: results line settings.sampling.stop_strings = [1] must be a list of strings"));
}

TEST_CASE("the streamed summaries: any line order, a planted suspect pair's keys, a cut line, malformed lines",
          "[experiments]") {
  TinyExperiment e;
  FakeBackend backend;
  REQUIRE(e.run(backend) == 0);
  std::vector<nlohmann::json> lines = e.lines();
  const fs::path results = e.out / "results.jsonl";
  const auto write_lines = [&](const std::vector<nlohmann::json>& ls, const std::string& tail) {
    std::ofstream out(results, std::ios::trunc | std::ios::binary);
    for (const nlohmann::json& l : ls) out << l.dump() << "\n";
    out << tail;
  };
  // A decode speedup far above its bound on one (prompt, seed) of a drafting run: the report
  // names its jobs and the baseline's (read again from the file: the digest keeps no keys).
  const nlohmann::json planted = *std::find_if(lines.begin(), lines.end(), [](const auto& l) { return l["shape"] != "none"; });
  std::vector<std::string> own, base;
  for (nlohmann::json& l : lines) {
    if (l["prompt_id"] != planted["prompt_id"] || l["seed"] != planted["seed"]) continue;
    if (l["run"] == planted["run"]) {
      l["stats"]["decode_tokens_per_s"] = 1000 * l["stats"]["decode_tokens_per_s"].get<double>();
      own.push_back(l["key"]);
    }
    if (l["run"] == planted["baseline"]) base.push_back(l["key"]);
  }
  REQUIRE(own.size() == 3);  // the repetitions
  REQUIRE(base.size() == 3);
  std::string jobs = "; jobs:";
  for (const std::string& key : own) jobs += " " + key;
  for (const std::string& key : base) jobs += " " + key;
  write_lines(lines, "");
  std::string printed;
  FakeBackend idle;
  REQUIRE(e.run(idle, &printed) == 0);  // every job done: the reports alone
  CHECK(idle.generate_calls == 0);
  CHECK_THAT(printed, Contains(jobs + "\n"));
  CHECK_THAT(read_text(e.out / "summary.md"), Contains(jobs + "\n"));
  const std::string csv = read_text(e.out / "summary.csv");

  // The same lines in another order give the same table (the sums run in file order: only
  // the CPU share, from measured times, may differ in its last digit).
  std::vector<nlohmann::json> shuffled = lines;
  std::reverse(shuffled.begin(), shuffled.end());
  std::rotate(shuffled.begin(), shuffled.begin() + 29, shuffled.end());
  write_lines(shuffled, "");
  REQUIRE(e.run(idle) == 0);
  CHECK(without_cpu_share(read_text(e.out / "summary.csv")) == without_cpu_share(csv));

  // A last line cut by a crash is left out of the report, with a note.
  write_lines(lines, lines.back().dump().substr(0, 40));
  std::ostringstream out, log;
  REQUIRE(report_experiment(e.out.string(), out, log) == 0);
  CHECK_THAT(log.str(), Contains(results.string() + ": ignoring a last line cut short by a crash"));
  CHECK(read_text(e.out / "summary.csv") == csv);

  // A malformed complete line is refused naming path:line, and the tables are left as they were;
  // so is a field of the wrong type the shape check leaves to the summaries (a batched line's
  // settings.request_rate).
  std::vector<nlohmann::json> broken = lines;
  broken[6] = "not an object";
  write_lines(broken, "");
  CHECK_THROWS_WITH(report_experiment(e.out.string(), out, log), Contains(results.string() + ":7: not a JSON object"));
  broken = lines;
  broken[4]["requests"] = {{{"prompt_id", "p"}, {"latency", nlohmann::json::object()}, {"stats", nlohmann::json::object()}}};
  broken[4]["stats"].update({{"throughput_tokens_per_s", 1}, {"mean_occupancy", 1}, {"rows_per_forward", 1},
                             {"latency_s", nlohmann::json::object()}, {"ttft_s", nlohmann::json::object()},
                             {"inter_token_s", nlohmann::json::object()}});
  broken[4]["settings"]["request_rate"] = "fast";
  write_lines(broken, "");
  CHECK_THROWS_WITH(report_experiment(e.out.string(), out, log),
                    Contains(results.string() + ":5: a results line has a field of the wrong shape"));
  CHECK(read_text(e.out / "summary.csv") == csv);
}

TEST_CASE("reports note an incomplete run and results of mixed versions", "[experiments]") {
  TinyExperiment e;
  FakeBackend backend;
  REQUIRE(e.run(backend) == 0);
  const std::string md = (e.out / "summary.md").string();
  CHECK_THAT(test::slurp(md), !Contains("incomplete:") && !Contains("mixed versions"));
  std::vector<nlohmann::json> lines = e.lines();
  const auto write_lines = [&](std::size_t count) {
    std::ofstream out(e.out / "results.jsonl", std::ios::trunc);
    for (std::size_t i = 0; i < count; ++i) out << lines[i].dump() << "\n";
  };
  write_lines(10);
  std::ostringstream out, log;
  REQUIRE(report_experiment(e.out.string(), out, log) == 0);
  CHECK_THAT(out.str(), Contains("incomplete: 10 of 72 jobs"));
  CHECK_THAT(test::slurp(md), Contains("incomplete: 10 of 72 jobs"));
  lines[3]["machine"]["version"] = "v0-older";
  write_lines(lines.size());
  out.str("");
  REQUIRE(report_experiment(e.out.string(), out, log) == 0);
  CHECK_THAT(out.str(), !Contains("incomplete:") && Contains("mixed versions: ") && Contains("v0-older"));
  CHECK_THAT(test::slurp(md), Contains("mixed versions: ") && Contains("v0-older"));
}

TEST_CASE("png output draws the plots with matplotlib, or warns and keeps the tables", "[experiments]") {
  TinyExperiment e;
  std::string text = tiny_config("sampling = [{ strategy = \"greedy\" }, { strategy = \"sample\" }]\n");
  const std::string formats = "formats = [\"csv\", \"md\"]";
  text.replace(text.find(formats), formats.size(), "formats = [\"csv\", \"md\", \"png\"]");
  e.config = e.scratch.write("tiny.toml", text);
  FakeBackend backend;
  std::string printed;
  e.run(backend, &printed);
  CHECK(fs::is_regular_file(e.out / "summary.md"));
  std::string probe;
  const bool matplotlib = run_command({"python3", "-c", "import matplotlib"}, probe) == 0 ||
                          run_command({"/usr/bin/python3", "-c", "import matplotlib"}, probe) == 0;
  if (!matplotlib) {
    CHECK_THAT(printed, Contains("warning: no python3 with matplotlib"));
    return;
  }
  for (const char* png : {"acceptance_vs_gamma.png", "speedup_vs_gamma.png", "acceptance_per_depth.png", "sampler_comparison.png"}) {
    INFO(png << "\n" << printed);
    REQUIRE(fs::is_regular_file(e.out / png));
    CHECK(read_text(e.out / png).substr(0, 4) == "\x89PNG");
  }
  CHECK(!fs::exists(e.out / "tree_shapes.png"));  // chains only
}

}  // namespace
}  // namespace specula

namespace specula {
namespace {

// A sweep of `drafters` drafters × `gammas` (× greedy and sampling when `samplers`) on the
// fake backend: one series per drafter (and strategy) in the plots. The drafters differ in
// draft.ngram_max, which a model drafter ignores, so that their runs are distinct.
std::string many_series_config(int drafters, const std::string& gammas, bool samplers) {
  std::string tables;
  for (int i = 0; i < drafters; ++i) {
    tables += "  { name = \"d" + std::to_string(i) + "\", ngram_max = " + std::to_string(i + 1) + " },\n";
  }
  std::string text = tiny_config();
  text = text.substr(0, text.find("[sweep]"));
  auto replace = [&](const std::string& from, const std::string& to) { text.replace(text.find(from), from.size(), to); };
  replace("seeds = [0, 1]", "seeds = [0]\nrepetitions = 1");
  replace("formats = [\"csv\", \"md\"]", "formats = [\"csv\", \"md\", \"png\"]");
  text += "[sweep]\ndraft = [\n" + tables + "]\n\"draft.gamma\" = " + gammas + "\n";
  if (samplers) text += "sampling = [{ strategy = \"greedy\" }, { strategy = \"sample\", temperature = 0.7 }]\n";
  return text;
}

TEST_CASE("the plots of 1, 10 and 40 series are written without an error", "[experiments][plots]") {
  std::string probe;
  if (run_command({"/usr/bin/python3", "-c", "import matplotlib"}, probe) != 0 &&
      run_command({"python3", "-c", "import matplotlib"}, probe) != 0) {
    WARN("no python3 with matplotlib: plots not tested");
    return;
  }
  struct Case {
    int drafters;
    const char* gammas;
    bool samplers;
    std::vector<std::string> files;  // expected among others
  };
  const Case cases[] = {
      {1, "[4]", false, {"speedup_vs_gamma.png", "acceptance_per_depth.png", "accepted_histogram.png"}},
      {10, "[1, 2]", true, {"acceptance_vs_gamma-2.png", "speedup_vs_gamma-2.png", "sampler_comparison.png",
                             "acceptance_per_depth-4.png"}},
      {40, "[2]", false, {"speedup_vs_gamma-4.png", "acceptance_per_depth-4.png", "accepted_histogram-4.png"}},
  };
  for (const Case& c : cases) {
    INFO(c.drafters << " drafters");
    ScratchDir scratch;
    const std::string config = scratch.write("many.toml", many_series_config(c.drafters, c.gammas, c.samplers));
    FakeBackend backend;
    std::ostringstream out, log;
    REQUIRE(run_experiment(config, backend, {(scratch.path() / "out").string(), false, true, {}}, out, log) == 0);
    INFO(log.str());
    CHECK_THAT(log.str(), !Contains("warning"));
    CHECK_THAT(log.str(), !Contains("Traceback"));
    for (const std::string& png : c.files) {
      INFO(png);
      REQUIRE(fs::is_regular_file(scratch.path() / "out" / png));
      CHECK(read_text(scratch.path() / "out" / png).substr(0, 4) == "\x89PNG");
    }
  }
}

}  // namespace
}  // namespace specula

namespace specula {
namespace {

// Two batch sizes of draft-4m γ = 2 and their plain baselines, 3 prompts arriving at 5 per
// second, 2 seeds × 2 repetitions: 4 runs × 4 batched jobs of 3 requests each.
struct BatchedExperiment {
  ScratchDir scratch;
  std::string config = scratch.write(
      "batched.toml", "title = \"batched\"\n[target]\npath = \"" + test::model_dir("target-16m") +
                          "\"\n[draft]\nmethod = \"model\"\npath = \"" + test::model_dir("draft-4m") +
                          "\"\ngamma = 2\n[run]\nprompts = [\"hello\", \"world!\", \"foo bar\"]\nmax_new_tokens = 8\n"
                          "seeds = [0, 1]\nrepetitions = 2\nrequest_rate = 5\n[output]\nformats = [\"csv\", \"md\"]\n"
                          "[sweep]\n\"run.batch_size\" = [1, 4]\n");
  fs::path out = scratch.path() / "out";
  RunOptions options{out.string(), false, true, {}};
  static constexpr int kJobs = 16;

  std::string run(FakeBackend& backend) {
    std::ostringstream printed, log;
    REQUIRE(run_experiment(config, backend, options, printed, log) == 0);
    return printed.str();
  }
  std::vector<nlohmann::json> lines() const { return read_lines(out / "results.jsonl"); }
};

}  // namespace

TEST_CASE("a batched run writes one line per job with every request's latency, and resumes exactly",
          "[experiments][batched]") {
  BatchedExperiment e;
  FakeBackend backend;
  const std::string printed = e.run(backend);
  CHECK(backend.batch_calls == BatchedExperiment::kJobs);
  CHECK(backend.generate_calls == 4 + BatchedExperiment::kJobs * 3);  // a one-request warm-up per run
  const std::vector<nlohmann::json> lines = e.lines();
  REQUIRE(lines.size() == static_cast<std::size_t>(BatchedExperiment::kJobs));
  require_complete(lines, e.config);
  std::map<std::string, std::map<std::string, double>> throughput;  // run -> seed/rep -> tok/s
  for (const nlohmann::json& l : lines) {
    INFO(l.at("key"));
    CHECK(l.at("prompt_id") == "*");
    const int batch = l.at("settings").at("batch_size").get<int>();
    CHECK((batch == 1 || batch == 4));
    CHECK(l.at("stats").at("batch_size") == batch);
    const nlohmann::json& requests = l.at("requests");
    REQUIRE(requests.size() == 3);
    const std::vector<double> arrivals = poisson_arrivals(3, 5.0, l.at("seed").get<uint64_t>());
    for (std::size_t i = 0; i < 3; ++i) {
      const nlohmann::json& r = requests[i];
      CHECK(r.at("prompt_id") == "prompt-" + std::to_string(i));
      CHECK(r.at("prompt_index") == i);
      CHECK(r.at("arrival_s").get<double>() == arrivals[i]);
      for (const char* field : {"ttft_s", "latency_s"}) CHECK(r.at("latency").at(field).is_number());
      for (const char* field : {"mean", "p50", "p99"}) CHECK(r.at("latency").at("inter_token_s").at(field).is_number());
      CHECK(r.contains("ids"));
      CHECK(r.at("stats").at("new_tokens") == 8);
    }
    throughput[l.at("run").get<std::string>()][l.at("seed").dump() + "/" + l.at("repetition").dump()] =
        l.at("stats").at("throughput_tokens_per_s").get<double>();
  }
  // Arrivals: the seed's Poisson times, the first at 0, the same for every run of that seed.
  REQUIRE(backend.arrivals_seen.size() == static_cast<std::size_t>(BatchedExperiment::kJobs));
  for (const std::vector<double>& a : backend.arrivals_seen) {
    REQUIRE(a.size() == 3);
    CHECK(a[0] == 0.0);
    CHECK((a == poisson_arrivals(3, 5.0, 0) || a == poisson_arrivals(3, 5.0, 1)));
  }
  CHECK(poisson_arrivals(3, 5.0, 0) != poisson_arrivals(3, 5.0, 1));
  // Speedups: per batch size against the plain run at that batch size, from the lines.
  const std::vector<BatchSummary> summaries = summarize_batches(digest_of(lines));
  REQUIRE(summaries.size() == 4);
  for (const BatchSummary& s : summaries) {
    INFO(s.run.label);
    if (s.run.shape == "none") {
      CHECK(std::isnan(s.speedup.estimate));
      continue;
    }
    const auto base = std::find_if(summaries.begin(), summaries.end(), [&](const BatchSummary& b) { return b.run.id == s.run.baseline; });
    REQUIRE(base != summaries.end());
    CHECK(base->batch_size == s.batch_size);
    double log_sum = 0;
    for (const auto& [pair, tps] : throughput[s.run.id]) log_sum += std::log(tps / throughput[s.run.baseline].at(pair));
    CHECK(s.pairs == 4);
    CHECK(s.speedup.estimate == Approx(std::exp(log_sum / 4)));
    CHECK(s.requests == 3);
  }
  CHECK(fs::exists(e.out / "batch_summary.csv"));
  const std::string md = read_text(e.out / "summary.md");
  CHECK_THAT(md, Contains("## Batched runs"));
  CHECK_THAT(md, Contains("| batch 1 "));
  CHECK_THAT(md, Contains("| batch 4 "));
  CHECK_THAT(printed, Contains("Batched runs"));

  // A crash in the middle of the 6th line: the rerun keeps 5 lines and runs the 11 others.
  const std::string full = read_text(e.out / "results.jsonl");
  std::size_t cut = 0;
  for (int i = 0; i < 5; ++i) cut = full.find('\n', cut) + 1;
  fs::resize_file(e.out / "results.jsonl", cut + (full.find('\n', cut) - cut) / 2);
  FakeBackend second;
  e.run(second);
  CHECK(second.batch_calls == BatchedExperiment::kJobs - 5);
  const std::string resumed = read_text(e.out / "results.jsonl");
  CHECK(resumed.substr(0, cut) == full.substr(0, cut));
  require_complete(e.lines(), e.config);
  FakeBackend third;
  e.run(third);
  CHECK(third.batch_calls == 0);
  CHECK(third.generate_calls == 0);
  CHECK(read_text(e.out / "results.jsonl") == resumed);
}

}  // namespace specula

namespace specula {
namespace {

// The lines without their machine records (the timings of whichever machine ran them).
std::vector<nlohmann::json> lines_without_machine(std::vector<nlohmann::json> lines) {
  for (nlohmann::json& line : lines) line = without_machine(std::move(line));
  return lines;
}

TEST_CASE("shard I/N runs whole units, and report joins N shards into the unsharded run's results and summary",
          "[experiments][shards]") {
  TinyExperiment whole;
  FakeBackend plain_backend;
  REQUIRE(whole.run(plain_backend) == 0);
  const std::vector<nlohmann::json> expected = lines_without_machine(whole.lines());
  const std::string expected_csv = without_cpu_share(read_text(whole.out / "summary.csv"));

  for (int n : {1, 3, 7}) {
    INFO(n << " shards");
    TinyExperiment e;
    int jobs = 0;
    for (int i = 0; i < n; ++i) {
      FakeBackend backend;
      e.options.shard = Shard{i, n};
      std::string printed;
      REQUIRE(e.run(backend, &printed) == 0);
      CHECK_THAT(printed, Contains("specula report " + e.out.string()));
      const std::vector<nlohmann::json> lines = read_lines(e.out / shard_directory({i, n}) / "results.jsonl");
      jobs += static_cast<int>(lines.size());
      // Each unit (prompt, seed, repetition) with all its runs, the baseline's included.
      std::map<std::string, int> runs_of_unit;
      for (const nlohmann::json& l : lines)
        ++runs_of_unit[l.at("prompt_id").get<std::string>() + "/" + l.at("seed").dump() + "/" + l.at("repetition").dump()];
      for (const auto& [unit, runs] : runs_of_unit) CHECK(runs == TinyExperiment::kRuns);
    }
    CHECK(jobs == TinyExperiment::kJobs);
    CHECK(!fs::exists(e.out / "results.jsonl"));  // shards write into their own directories only
    std::ostringstream out, log;
    REQUIRE(report_experiment(e.out.string(), out, log) == 0);
    CHECK(lines_without_machine(e.lines()) == expected);
    CHECK(without_cpu_share(read_text(e.out / "summary.csv")) == expected_csv);
    const nlohmann::json record = nlohmann::json::parse(read_text(e.out / "experiment.json"));
    CHECK(record["joined_shards"] == n);
    CHECK(record["sessions"].back()["planned_jobs"] == TinyExperiment::kJobs);
    REQUIRE(report_experiment(e.out.string(), out, log) == 0);  // a second join replaces the first
    CHECK(lines_without_machine(e.lines()) == expected);
  }
}

TEST_CASE("a killed shard resumes, and report refuses a missing or unfinished shard and a directory not joined",
          "[experiments][shards]") {
  TinyExperiment e;
  e.options.shard = Shard{1, 3};
  run_until_killed(e, 9);
  const auto report = [&] {
    std::ostringstream out, log;
    return report_experiment(e.out.string(), out, log);
  };
  FakeBackend first;
  e.options.shard = Shard{0, 3};
  REQUIRE(e.run(first) == 0);
  CHECK_THROWS_WITH(report(), Contains("shard 2 of 3 is missing") && Contains("--shard 2/3"));
  FakeBackend third;
  e.options.shard = Shard{2, 3};
  REQUIRE(e.run(third) == 0);
  CHECK_THROWS_WITH(report(), Contains("shard 1 of 3 holds ") && Contains("--shard 1/3"));
  CHECK(!fs::exists(e.out / "results.jsonl"));
  FakeBackend resumed;
  e.options.shard = Shard{1, 3};
  REQUIRE(e.run(resumed) == 0);
  REQUIRE(report() == 0);
  require_complete(e.lines(), e.config);

  fs::create_directory(e.out / "shard-0-of-2");
  CHECK_THROWS_WITH(report(), Contains("shards of different counts"));

  TinyExperiment unsharded;  // its results.jsonl was not written by a join: never replaced
  FakeBackend all;
  REQUIRE(unsharded.run(all) == 0);
  const std::string results = read_text(unsharded.out / "results.jsonl");
  FakeBackend one;
  unsharded.options.shard = Shard{0, 1};
  REQUIRE(unsharded.run(one) == 0);
  std::ostringstream out, log;
  CHECK_THROWS_WITH(report_experiment(unsharded.out.string(), out, log), Contains("no join of shards wrote"));
  CHECK(read_text(unsharded.out / "results.jsonl") == results);
}

TEST_CASE("a shard is named I/N with I from 0 to N - 1", "[experiments][shards]") {
  CHECK(parse_shard("0/1").index == 0);
  CHECK(parse_shard("2/3").count == 3);
  for (const char* bad : {"3/3", "-1/2", "1/0", "x/2", "1/2/3", "1", "", "1/ 2", "0/2000000"})
    CHECK_THROWS_WITH(parse_shard(bad), Contains("--shard") && Contains(std::string("'") + bad + "'"));
}

}  // namespace
}  // namespace specula
