// The sweep grid is the product of the axes; baselines are added once per distinct
// target-alone setting; jobs have stable, unique keys.
#include <catch2/catch.hpp>
#include <regex>
#include <set>

#include "base/error.h"
#include "experiments/config.h"
#include "experiments/plan.h"
#include "tests/test_experiments_support.h"

namespace specula {
namespace {

using test::model_dir;
using test::ScratchDir;
using test::tiny_config;

ExperimentConfig load_text(const ScratchDir& dir, const std::string& text) { return load_config(dir.write("c.toml", text)); }

TEST_CASE("the sweep grid is the product of the axes, first axis slowest", "[experiments]") {
  ScratchDir dir;
  const ExperimentConfig c = load_text(dir, tiny_config("sampling = [{ strategy = \"greedy\" }, { name = \"hot\", strategy = \"sample\", temperature = 1.5 }]\n"));
  REQUIRE(c.sweep.axes.size() == 2);
  CHECK(c.sweep.axes[0].key == "draft.gamma");
  CHECK(c.sweep.axes[1].key == "sampling");
  REQUIRE(c.grid.size() == 6);
  const std::vector<std::pair<int, Strategy>> expected = {{1, Strategy::kGreedy}, {1, Strategy::kSample},
                                                          {2, Strategy::kGreedy}, {2, Strategy::kSample},
                                                          {4, Strategy::kGreedy}, {4, Strategy::kSample}};
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(c.grid[i].point.draft.gamma == expected[i].first);
    CHECK(c.grid[i].point.sampling.strategy == expected[i].second);
    CHECK(c.grid[i].coords[0].first == "draft.gamma");
    CHECK(c.grid[i].coords[0].second == std::to_string(expected[i].first));
  }
  CHECK(c.grid[1].coords[1].second == "hot");                                      // a table's name is its label
  CHECK(c.grid[0].coords[1].second == "{strategy=greedy}");                        // else its rendering
  CHECK(c.grid[1].point.sampling.temperature == 1.5f);
  CHECK(c.grid[0].point.sampling.temperature == 1.0f);                             // untouched by the other value
}

TEST_CASE("sweep labels render values compactly", "[experiments]") {
  ScratchDir dir;
  const std::string text = tiny_config().substr(0, tiny_config().find("[sweep]")) +
                           "[sweep]\n\"sampling.temperature\" = [0.8, 1e-5, 2]\n\"draft.tree\" = [[3, 2], [4]]\n"
                           "sampling = [{ strategy = \"sample\", top_p = 0.95 }]\n";
  const ExperimentConfig c = load_text(dir, text);
  REQUIRE(c.grid.size() == 6);
  CHECK(c.grid[0].coords[0].second == "0.8");
  CHECK(c.grid[2].coords[0].second == "1e-05");
  CHECK(c.grid[4].coords[0].second == "2");
  CHECK(c.grid[0].coords[1].second == "[3,2]");
  CHECK(c.grid[0].coords[2].second == "{strategy=sample,top_p=0.95}");
  CHECK(make_plan(c).runs[1].info.label == "draft-4m · tree 3-2 · T=0.8 top-p=0.95");
}

TEST_CASE("a run label does not repeat what the drafter's name already says", "[experiments]") {
  ScratchDir dir;
  std::string text = tiny_config();
  text.insert(text.find("[run]"), "name = \"draft-4m γ=2\"\n");
  const Plan plan = make_plan(load_text(dir, text));
  REQUIRE(plan.runs.size() == 4);
  CHECK(plan.runs[2].info.label == "draft-4m γ=2 · greedy");  // not "draft-4m γ=2 · γ=2 · greedy"
  CHECK(plan.runs[1].info.label == "draft-4m γ=2 · γ=1 · greedy");
}

TEST_CASE("sweep.exclude drops the grid points it matches", "[experiments]") {
  ScratchDir dir;
  const std::string head = tiny_config().substr(0, tiny_config().find("[sweep]")) +
                           "[sweep]\nsampling = [{ strategy = \"greedy\" }, { strategy = \"beam\" }]\n"
                           "draft = [{ method = \"none\" }, { gamma = 2 }, { method = \"ngram\" }]\n";
  const ExperimentConfig c = load_text(dir, head + "exclude = [{ \"sampling.strategy\" = \"beam\", \"draft.method\" = \"model\" },\n"
                                                   "           { sampling = { strategy = \"beam\" }, draft.method = \"ngram\" }]\n");
  REQUIRE(c.grid.size() == 4);  // 2 × 3 - beam × (model, ngram)
  CHECK(c.sweep.exclusions.size() == 2);
  CHECK(c.grid[3].point.sampling.strategy == Strategy::kBeam);
  CHECK(c.grid[3].point.draft.method == DraftMethod::kNone);
  const Plan plan = make_plan(c);
  CHECK(plan.runs.size() == 4);  // the target-alone points are the baselines
  CHECK_THAT(c.resolved_toml, Catch::Matchers::Contains(R"(exclude = [ { "draft.method" = "model", "sampling.strategy" = "beam" })"));

  auto error = [&](const std::string& exclude) {
    try {
      load_text(dir, head + exclude);
    } catch (const SpeculaError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using Catch::Matchers::Contains;
  CHECK_THAT(error("exclude = [{ \"sampling.strategy\" = \"sample\" }]\n"),
             Contains("c.toml:18:12: sweep.exclude entry {sampling.strategy=sample} matches no point of the grid"));
  CHECK_THAT(error("exclude = [{ \"draft.gama\" = 2 }]\n"), Contains("c.toml:18:14: unknown key 'draft.gama'; did you mean 'draft.gamma'?"));
  CHECK_THAT(error("exclude = [{ \"run.seeds\" = [1] }]\n"), Contains("c.toml:18:14: 'run.seeds' cannot be swept"));
  CHECK_THAT(error("exclude = [\"beam\"]\n"), Contains("c.toml:18:12: sweep.exclude entries must be tables of sweepable keys"));
  CHECK_THAT(error("exclude = { a = 1 }\n"), Contains("c.toml:18:11: sweep.exclude must be a list of tables"));
  CHECK_THAT(error("exclude = [{ \"run.max_new_tokens\" = 8 }]\n"), Contains("c.toml: sweep.exclude removes every point"));
}

TEST_CASE("nested sweep tables are dotted keys, in the order the file writes them", "[experiments]") {
  ScratchDir dir;
  const std::string text = test::tiny_config() ;
  // Replace the quoted-key sweep with [sweep.draft] and a later run.max_new_tokens axis.
  const std::string nested = text.substr(0, text.find("[sweep]")) +
                             "[sweep.run]\nmax_new_tokens = [4, 8]\n[sweep.draft]\ngamma = [2, 3, 5]\n";
  const ExperimentConfig c = load_text(dir, nested);
  REQUIRE(c.sweep.axes.size() == 2);
  CHECK(c.sweep.axes[0].key == "run.max_new_tokens");
  CHECK(c.sweep.axes[1].key == "draft.gamma");
  CHECK(c.grid.size() == 6);
  CHECK(c.grid[0].point.max_new_tokens == 4);
  CHECK(c.grid[5].point.max_new_tokens == 8);
  CHECK(c.grid[5].point.draft.gamma == 5);
}

TEST_CASE("one baseline per distinct target-alone setting, shared by the points", "[experiments]") {
  ScratchDir dir;
  SECTION("a gamma sweep of two drafters shares one baseline") {
    const std::string text = tiny_config("draft = [{ path = \"" + model_dir("draft-4m") + "\" }, { path = \"" +
                                         model_dir("draft-1m") + "\" }]\n");
    const Plan plan = make_plan(load_text(dir, text));
    REQUIRE(plan.runs.size() == 7);  // 1 baseline + 3 γ × 2 drafters
    CHECK(plan.runs[0].info.role == "baseline");
    CHECK(plan.runs[0].info.label == "target only · greedy");
    CHECK(plan.runs[0].config.draft.method == DraftMethod::kNone);
    for (std::size_t i = 1; i < plan.runs.size(); ++i) {
      CHECK(plan.runs[i].info.role == "point");
      CHECK(plan.runs[i].info.baseline == plan.runs[0].info.id);
    }
    CHECK(plan.runs[1].info.label == "draft-4m · γ=1 · greedy");
    CHECK(plan.runs[2].info.label == "draft-1m · γ=1 · greedy");
    CHECK(plan.runs[6].info.label == "draft-1m · γ=4 · greedy");
    CHECK(plan.runs[6].info.nodes == 4);
  }
  SECTION("each sampler has its own baseline") {
    const Plan plan = make_plan(load_text(dir, tiny_config("sampling = [{ strategy = \"greedy\" }, { strategy = \"sample\", top_k = 5 }]\n")));
    REQUIRE(plan.runs.size() == 8);  // 2 baselines + 3 γ × 2 samplers
    std::set<std::string> baselines;
    for (const PlannedRun& r : plan.runs) {
      if (r.info.role == "baseline") baselines.insert(r.info.id);
    }
    CHECK(baselines.size() == 2);
    for (const PlannedRun& r : plan.runs) {
      if (r.info.role != "point") continue;
      REQUIRE(baselines.count(r.info.baseline));
      const auto& base = *std::find_if(plan.runs.begin(), plan.runs.end(), [&](const PlannedRun& b) { return b.info.id == r.info.baseline; });
      CHECK(base.config.sampling.strategy == r.config.sampling.strategy);
      CHECK(base.config.sampling.top_k == r.config.sampling.top_k);
    }
    CHECK(plan.runs[1].info.label == "draft-4m · γ=1 · greedy");
    CHECK(plan.runs[3].info.label == "draft-4m · γ=1 · T=1 top-k=5");
  }
  SECTION("a grid point that drafts nothing is the baseline itself") {
    const std::string text = tiny_config().substr(0, tiny_config().find("[sweep]")) +
                             "[sweep]\ndraft = [{ method = \"none\" }, { gamma = 3 }]\n";
    const Plan plan = make_plan(load_text(dir, text));
    REQUIRE(plan.runs.size() == 2);
    CHECK(plan.runs[0].info.role == "point");
    CHECK(plan.runs[0].info.shape == "none");
    CHECK(plan.runs[1].info.baseline == plan.runs[0].info.id);
  }
  SECTION("swept keys the labels do not show are appended") {
    const Plan plan = make_plan(load_text(dir, tiny_config("\"run.threads\" = [1, 2]\n")));
    REQUIRE(plan.runs.size() == 8);  // per thread count: 1 baseline + 3 points
    CHECK(plan.runs[0].info.label == "target only · run.threads=1 · greedy");
    CHECK(plan.runs[1].info.label == "draft-4m · γ=1 run.threads=1 · greedy");
    CHECK(plan.runs[2].info.label == "target only · run.threads=2 · greedy");
  }
}

TEST_CASE("draft shapes: chain, static tree, dynamic tree, adaptive", "[experiments]") {
  ScratchDir dir;
  const std::string text = tiny_config().substr(0, tiny_config().find("[sweep]")) +
                           "[sweep]\ndraft = [{ gamma = 8 }, { tree = [2, 3] }, { budget = 8 }, { adaptive = true, gamma = 6 }]\n";
  const Plan plan = make_plan(load_text(dir, text));
  REQUIRE(plan.runs.size() == 5);
  struct Shape {
    const char* shape;
    const char* tree;
    int nodes;
    const char* label;
  };
  const Shape expected[] = {{"chain", "", 8, "draft-4m · γ=8 · greedy"},
                            {"tree", "2-3", 8, "draft-4m · tree 2-3 · greedy"},
                            {"dynamic", "", 8, "draft-4m · dynamic 8 · greedy"},
                            {"adaptive", "", 6, "draft-4m · adaptive γ≤6 · greedy"}};
  for (int i = 0; i < 4; ++i) {
    const RunInfo& r = plan.runs[i + 1].info;
    CHECK(r.shape == expected[i].shape);
    CHECK(r.tree == expected[i].tree);
    CHECK(r.nodes == expected[i].nodes);
    CHECK(r.label == expected[i].label);
  }
}

TEST_CASE("jobs cover runs × prompts × seeds × repetitions with stable unique keys", "[experiments]") {
  ScratchDir dir;
  const std::string text = tiny_config();
  const std::string with_reps = text.substr(0, text.find("[output]")) + "repetitions = 2\n" + text.substr(text.find("[output]"));
  const ExperimentConfig c = load_text(dir, with_reps);
  const Plan a = make_plan(c), b = make_plan(load_text(dir, with_reps));
  REQUIRE(a.runs.size() == 4);
  REQUIRE(a.jobs.size() == 4 * 3 * 2 * 2);
  std::set<std::string> keys;
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    keys.insert(a.jobs[i].key);
    CHECK(a.jobs[i].key == b.jobs[i].key);
  }
  CHECK(keys.size() == a.jobs.size());
  // Prompt-major, then seed, then repetition: every run once per repetition, the point right
  // after its baseline, in reverse order on odd repetitions.
  // Keys: <run id>/<prompt id>#<hash of its text>/seed=S/rep=R.
  const auto key_is = [](const std::string& key, const std::string& id, const std::string& rest) {
    return std::regex_match(key, std::regex(id + "/a#[0-9a-f]{8}/" + rest));
  };
  CHECK(key_is(a.jobs[0].key, a.runs[0].info.id, "seed=0/rep=0"));
  CHECK(key_is(a.jobs[1].key, a.runs[1].info.id, "seed=0/rep=0"));
  CHECK(key_is(a.jobs[3].key, a.runs[3].info.id, "seed=0/rep=0"));
  CHECK(key_is(a.jobs[4].key, a.runs[3].info.id, "seed=0/rep=1"));
  CHECK(key_is(a.jobs[7].key, a.runs[0].info.id, "seed=0/rep=1"));
  CHECK(key_is(a.jobs[8].key, a.runs[0].info.id, "seed=1/rep=0"));
  // An edited prompt text is another job (its outputs are not reused); the other prompts keep theirs.
  std::string edited = with_reps;
  REQUIRE(edited.find("prompt = \"") != std::string::npos);
  edited.insert(edited.find("prompt = \"") + 10, "edited ");
  const Plan e = make_plan(load_text(dir, edited));
  REQUIRE(e.jobs.size() == a.jobs.size());
  int changed = 0;
  for (std::size_t i = 0; i < a.jobs.size(); ++i) changed += e.jobs[i].key != a.jobs[i].key;
  CHECK(changed == static_cast<int>(a.jobs.size()) / 3);  // the jobs of one of the 3 prompts

  const GenerateOptions o = generate_options(a.runs[3], {1, 5, 9}, 7);
  CHECK(o.model_dir == c.base.point.target);
  CHECK(o.prompt_ids == std::vector<int>{1, 5, 9});
  CHECK(o.seed == 7);
  CHECK(o.max_new_tokens == 8);
  CHECK(o.draft.method == DraftMethod::kModel);
  CHECK(o.draft.gamma == 4);
  CHECK(o.sampling.strategy == Strategy::kGreedy);
}

}  // namespace
}  // namespace specula
