// The runner end to end with a fake backend: output files, summaries equal to a
// recomputation from results.jsonl, resume after a crash (cut line, SIGKILL) without loss
// or duplicates, dry runs, and refusals before anything runs.
#include <catch2/catch.hpp>
#include <set>
#include <sstream>
#include <sys/wait.h>

#include "experiments/config.h"
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

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// tiny_config writing into <scratch>/out: 4 runs × 3 prompts × 2 seeds = 24 jobs.
struct TinyExperiment {
  ScratchDir scratch;
  std::string config = scratch.write("tiny.toml", tiny_config());
  fs::path out = scratch.path() / "out";
  RunOptions options{out.string(), false, true};
  static constexpr int kJobs = 24;

  int run(FakeBackend& backend, std::string* printed = nullptr) {
    std::ostringstream out_stream, log;
    const int status = run_experiment(config, backend, options, out_stream, log);
    if (printed) *printed = out_stream.str() + log.str();
    return status;
  }
  std::vector<nlohmann::json> lines() const { return read_results((out / "results.jsonl").string()).lines; }
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
  CHECK(backend.generate_calls == TinyExperiment::kJobs);
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
  CHECK_THAT(csv, Contains(",draft-4m,chain,,4,4,γ=4,greedy,all,6,6,0.575,"));
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
  CHECK(second.generate_calls == TinyExperiment::kJobs - 10);
  CHECK_THAT(printed, Contains("dropped a last line cut short by a crash"));
  CHECK_THAT(printed, Contains("[14/14] "));
  const std::string resumed = read_text(e.out / "results.jsonl");
  CHECK(resumed.substr(0, cut) == full.substr(0, cut));
  require_complete(e.lines(), e.config);

  FakeBackend third;  // nothing left to do
  e.run(third);
  CHECK(third.generate_calls == 0);
  CHECK(read_text(e.out / "results.jsonl") == resumed);
  CHECK(nlohmann::json::parse(read_text(e.out / "experiment.json"))["sessions"].size() == 3);
}

TEST_CASE("a run killed with SIGKILL resumes without loss or duplicates", "[experiments]") {
  TinyExperiment e;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    FakeBackend dying;
    dying.kill_on_call = 8;  // seven lines are written, then the process dies in generate()
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
  CHECK(e.lines().size() == 7);

  FakeBackend resumed;
  e.run(resumed);
  CHECK(resumed.generate_calls == TinyExperiment::kJobs - 7);
  require_complete(e.lines(), e.config);
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
  CHECK_THAT(printed, Contains("prompts: 3 (x 2, y 1), seeds [0,1], repetitions 1"));
  CHECK_THAT(printed, Contains("#0 baseline target only · greedy"));
  CHECK_THAT(printed, Contains("#3 point draft-4m · γ=4 · greedy"));
  CHECK_THAT(printed, Contains("jobs: 24, 0 already in results.jsonl, 24 to run"));
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
  const std::string path = dir.write("results.jsonl", "{\"key\": 1}\nnot json\n{\"key\": 2}\n");
  CHECK_THROWS_WITH(read_results(path), Contains(path + ":2: not a JSON object"));
  const ResultsRead cut = read_results(dir.write("cut.jsonl", "{\"key\": 1}\n{\"key\""));
  CHECK(cut.lines.size() == 1);
  CHECK(cut.cut_line);
  CHECK(cut.complete_bytes == 11);
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
