// Experiment configs: the shipped ones load, and every kind of bad config is refused
// with an error that names the key and the file:line.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "engine/cuda/device.h"
#include "experiments/config.h"
#include "experiments/plan.h"
#include "tests/test_experiments_support.h"

namespace specula {
namespace {

using Catch::Matchers::Contains;
using test::model_dir;
using test::ScratchDir;
using test::source_path;

// Lines 1-4: a valid config; `tail` starts on line 5 ("[run]" extras go in `run_extra`).
std::string minimal(const std::string& tail, const std::string& run_extra = "") {
  return "[target]\npath = \"" + model_dir("target-16m") + "\"\n[run]\nprompts = [\"hi\"]\n" + run_extra + tail;
}

// Loads `text` as a config; its error must contain every piece ("@" stands for the file).
void require_error(const std::string& text, const std::vector<std::string>& pieces) {
  ScratchDir dir;
  const std::string file = dir.write("bad.toml", text);
  try {
    load_config(file);
    FAIL("accepted:\n" << text);
  } catch (const SpeculaError& e) {
    for (std::string piece : pieces) {
      if (const auto at = piece.find('@'); at != std::string::npos) piece.replace(at, 1, file);
      CHECK_THAT(e.what(), Contains(piece));
    }
  }
}

TEST_CASE("shipped configs load, and their resolved form loads to the same runs", "[experiments]") {
  struct Shipped {
    const char* file;
    std::size_t grid, prompts, seeds;
  };
  for (const Shipped& s : {Shipped{"configs/quickstart.toml", 6, 8, 1}, Shipped{"configs/acceptance-study.toml", 18, 35, 1},
                           Shipped{"configs/sampler-comparison.toml", 28, 16, 3}, Shipped{"configs/tree-shapes.toml", 12, 16, 1},
                           Shipped{"configs/sequoia-calibration.toml", 2, 16, 1}, Shipped{"configs/length-policies.toml", 32, 35, 1},
                           Shipped{"configs/beam-speculative.toml", 24, 6, 1},
                           Shipped{"configs/speedup-cpu.toml", 42, 9, 1}, Shipped{"configs/speedup-goals.toml", 3, 28, 1},
                           Shipped{"configs/batch-sizes.toml", 48, 35, 1}, Shipped{"configs/kv-dtype.toml", 6, 2, 1},
                           Shipped{"configs/tight-pool.toml", 4, 16, 1}, Shipped{"configs/policies.toml", 23, 35, 4},
                           Shipped{"configs/draft-heads.toml", 54, 12, 1}}) {
    INFO(s.file);
    const ExperimentConfig c = load_config(source_path(s.file));
    CHECK(c.grid.size() == s.grid);
    CHECK(c.prompts.size() == s.prompts);
    CHECK(c.base.run.seeds.size() == s.seeds);
    CHECK(c.base.point.target == std::filesystem::weakly_canonical(model_dir("target-16m")).string());
    CHECK(!c.base.title.empty());

    ScratchDir dir;
    const ExperimentConfig again = load_config(dir.write("resolved.toml", c.resolved_toml));
    const Plan a = make_plan(c), b = make_plan(again);
    REQUIRE(a.runs.size() == b.runs.size());
    for (std::size_t i = 0; i < a.runs.size(); ++i) CHECK(a.runs[i].info.id == b.runs[i].info.id);
    CHECK(again.base.output.directory == c.base.output.directory);
  }
}

TEST_CASE("the shipped GPU config loads where a GPU is and is refused naming run.backend where none is",
          "[experiments]") {
  const std::string file = source_path("configs/gpu-speedup.toml");
  if (cuda_device_count() > 0) {
    const ExperimentConfig c = load_config(file);
    CHECK(c.grid.size() == 18);
    CHECK(c.prompts.size() == 16);
    CHECK(make_plan(c).runs.size() == 20);
    return;
  }
  try {
    load_config(file);
    FAIL("accepted without a GPU: " << file);
  } catch (const SpeculaError& e) {
    CHECK_THAT(e.what(), Contains(file) && Contains("run.backend cuda: no usable GPU"));
  }
}

TEST_CASE("logit controls and stop strings load from sampling.*, label the run, key it only when set and survive resolving",
          "[experiments]") {
  ScratchDir dir;
  const ExperimentConfig plain = load_config(dir.write("plain.toml", minimal("")));
  const ExperimentConfig c = load_config(dir.write(
      "controls.toml", minimal("[sampling]\nrepetition_penalty = 1.25\nfrequency_penalty = -0.5\n"
                               "no_repeat_ngram_size = 3\nlogit_bias = [[3, -1.5], [7, 2]]\nbanned_tokens = [11]\n"
                               "min_new_tokens = 4\nstop_strings = [\"\\n\\n\", \"END\"]\n")));
  const LogitControls& k = c.base.point.controls;
  CHECK(k.repetition_penalty == 1.25f);
  CHECK(k.frequency_penalty == -0.5f);
  CHECK(k.no_repeat_ngram_size == 3);
  CHECK(k.logit_bias == std::vector<std::pair<int, float>>{{3, -1.5f}, {7, 2.0f}});
  CHECK(k.banned_tokens == std::vector<int>{11});
  CHECK(k.min_new_tokens == 4);
  CHECK(c.base.point.stop_strings == std::vector<std::string>{"\n\n", "END"});
  CHECK(request_options(c.base.point).stop_strings == c.base.point.stop_strings);
  const Plan a = make_plan(c), none = make_plan(plain);
  CHECK_THAT(a.runs[0].info.label, Contains("greedy rep=1.25 freq=-0.5 no-repeat=3 bias×2 banned×1 min-new=4 stop×2"));
  CHECK(a.runs[0].settings["sampling"]["stop_strings"] == nlohmann::json::parse(R"(["\n\n", "END"])"));
  CHECK(a.runs[0].settings["sampling"]["logit_bias"] == nlohmann::json::parse("[[3, -1.5], [7, 2.0]]"));
  CHECK(!none.runs[0].settings["sampling"].contains("repetition_penalty"));  // earlier run ids unchanged
  CHECK(!none.runs[0].settings["sampling"].contains("stop_strings"));
  CHECK(a.runs[0].info.id != none.runs[0].info.id);
  const ExperimentConfig again = load_config(dir.write("resolved.toml", c.resolved_toml));
  CHECK(make_plan(again).runs[0].info.id == a.runs[0].info.id);
  const ExperimentConfig beam = load_config(dir.write(
      "beam.toml", minimal("[sampling]\nstrategy = \"beam\"\nbeam_width = 3\nno_repeat_ngram_size = 2\n")));
  CHECK_THAT(make_plan(beam).runs[0].info.label, Contains("beam w=3 no-repeat=2"));
}

TEST_CASE("quickstart resolves to two draft models and n-grams at gamma 1 and 4, two prompts per domain",
          "[experiments]") {
  const ExperimentConfig c = load_config(source_path("configs/quickstart.toml"));
  REQUIRE(c.grid.size() == 6);
  const std::string draft_4m = std::filesystem::weakly_canonical(model_dir("draft-4m")).string();
  const std::string draft_1m = std::filesystem::weakly_canonical(model_dir("draft-1m")).string();
  std::map<std::pair<std::string, int>, int> points;  // (model folder or "ngram", gamma) -> count
  for (const GridPoint& g : c.grid) {
    CHECK(g.point.sampling.strategy == Strategy::kGreedy);
    const std::string drafter = g.point.draft.method == DraftMethod::kNgram ? "ngram" : g.point.draft.model_dir;
    ++points[{drafter, g.point.draft.gamma}];
  }
  CHECK(points == std::map<std::pair<std::string, int>, int>{{{draft_4m, 1}, 1}, {{draft_4m, 4}, 1},
                                                              {{draft_1m, 1}, 1}, {{draft_1m, 4}, 1},
                                                              {{"ngram", 1}, 1},  {{"ngram", 4}, 1}});
  CHECK(c.base.point.threads == 1);
  std::map<std::string, int> per_domain;
  for (const Prompt& p : c.prompts) ++per_domain[p.domain];
  CHECK(per_domain == std::map<std::string, int>{{"c", 2}, {"changelog", 2}, {"man", 2}, {"python", 2}});
  CHECK(c.base.output.directory == std::filesystem::weakly_canonical(source_path("results/quickstart")).string());
}

TEST_CASE("unknown keys are errors naming file:line and the closest valid key", "[experiments]") {
  require_error(minimal("[draft]\ngama = 4\n"), {"@:6:1: unknown key 'draft.gama'; did you mean 'draft.gamma'?"});
  require_error(minimal("[sampler]\nstrategy = \"greedy\"\n"), {"@:5:", "unknown key 'sampler'; did you mean 'sampling'?"});
  require_error(minimal("[sampling]\ngamma = 4\n"), {"@:6:1: unknown key 'sampling.gamma'; did you mean 'draft.gamma'?"});
  require_error("gamma = 4\n" + minimal(""), {"@:1:1: unknown key 'gamma'; did you mean 'draft.gamma'?"});
  require_error(minimal("", "gamma = 4\n"), {"@:5:1: unknown key 'run.gamma'; did you mean 'draft.gamma'?"});
  require_error(minimal("[draft]\nxyzzy_plugh = 4\n"),
                {"@:6:1: unknown key 'draft.xyzzy_plugh'; valid: draft.name, draft.method, draft.path, draft.weights, draft.gamma, "
                 "draft.tree, draft.budget, draft.sequoia, draft.siblings, draft.adaptive, draft.ngram_min, draft.ngram_max"});
  require_error("xyzzy_plugh = 4\n" + minimal(""),
                {"@:1:1: unknown key 'xyzzy_plugh'; valid: title, target, draft, verify, sampling, run, output, sweep"});
  require_error(minimal("", "prompts_per_domian = 2\n"), {"@:5:1: unknown key 'run.prompts_per_domian'; did you mean 'run.prompts_per_domain'?"});
  require_error(minimal("[sampling]\nstrategy = \"sampel\"\n"),
                {"@:6:", "sampling.strategy: unknown value 'sampel'; did you mean 'sample'?"});
  require_error("[target]\npath = \"" + model_dir("target-16m") + "\"\nweights = \"int4\"\n[run]\nprompts = [\"hi\"]\n",
                {"@:3:11: target.weights: unknown value 'int4'; did you mean 'int8'?"});
  require_error(minimal("[draft]\nmethod = \"model\"\npath = \"" + model_dir("draft-1m") + "\"\nweights = \"bf16dots\"\n"),
                {"@:8:11: draft.weights: unknown value 'bf16dots'; did you mean 'bf16dot'?"});
  require_error(minimal("[run.x]\n"), {"@:5:6: unknown key 'run.x'; valid: run.prompts_file, run.prompts, "});
}

TEST_CASE("wrong types are errors naming key, file:line and the type given", "[experiments]") {
  require_error(minimal("[draft]\ngamma = \"4\"\n"), {"@:6:9: draft.gamma must be an integer, got a string (4)"});
  require_error(minimal("[draft]\ngamma = 2.5\n"), {"@:6:9: draft.gamma must be an integer, got a float (2.5)"});
  require_error(minimal("[sampling]\ntemperature = \"hot\"\n"), {"@:6:", "sampling.temperature must be a number, got a string"});
  require_error(minimal("[draft]\nadaptive = 1\n"), {"@:6:", "draft.adaptive must be a boolean, got an integer (1)"});
  require_error(minimal("[draft]\ntree = 3\n"), {"@:6:", "draft.tree must be an array, got an integer"});
  require_error(minimal("[draft]\ntree = [2, \"x\"]\n"), {"@:6:", "draft.tree element must be an integer, got a string (x)"});
  require_error("draft = 3\n" + minimal(""), {"@:1:9: draft must be a table ([draft])"});
  require_error(minimal("", "seeds = 3\n"), {"@:5:", "run.seeds must be an array"});
  require_error(minimal("[output]\nformats = [\"csv\", \"pdf\"]\n"), {"@:6:", "output.formats: unknown value 'pdf'"});
  require_error(minimal("[output]\nformats = [\"md\", \"png\"]\n"),
                {"@:6:11: output.formats: the png plots are drawn from summary.csv; add \"csv\""});
}

TEST_CASE("target.weights and draft.weights reach the request — the run id changes only when the target's is set",
          "[experiments][int8][bf16dot]") {
  ScratchDir dir;
  const std::string head = "[target]\npath = \"" + model_dir("target-16m") + "\"\n";
  const std::string tail = "[draft]\nmethod = \"model\"\npath = \"" + model_dir("draft-1m") +
                           "\"\nweights = \"int8\"\n[run]\nprompts = [\"hi\"]\n";
  const ExperimentConfig stored = load_config(dir.write("stored.toml", head + tail));
  const ExperimentConfig int8 = load_config(dir.write("int8.toml", head + "weights = \"int8\"\n" + tail));
  CHECK_FALSE(request_options(stored.base.point).weights.has_value());
  CHECK(request_options(int8.base.point).weights == MatrixFormat::kInt8);
  CHECK(request_options(int8.base.point).draft.weights == MatrixFormat::kInt8);
  const nlohmann::json a = canonical_settings(stored.base.point), b = canonical_settings(int8.base.point);
  CHECK_FALSE(a.contains("target_weights"));  // runs on stored weights keep their ids
  CHECK(b.at("target_weights") == "int8");
  CHECK(a.at("draft").at("weights") == "int8");
  const ExperimentConfig bf16dot = load_config(dir.write(
      "bf16dot.toml", head + "weights = \"bf16dot\"\n" + std::string(tail).replace(tail.find("int8"), 4, "bf16dot")));
  CHECK(request_options(bf16dot.base.point).weights == MatrixFormat::kBF16Dot);
  CHECK(request_options(bf16dot.base.point).draft.weights == MatrixFormat::kBF16Dot);
  const nlohmann::json c = canonical_settings(bf16dot.base.point);
  CHECK(c.at("target_weights") == "bf16dot");
  CHECK(c.at("draft").at("weights") == "bf16dot");
}

TEST_CASE("out-of-range values are errors naming key, file:line and the range", "[experiments]") {
  struct Case {
    std::string tail, run_extra, message;
  };
  const std::vector<Case> cases = {
      {"[sampling]\ntemperature = -0.5\n", "", "@:6:15: sampling.temperature must be >= 0, got -0.5"},
      {"[sampling]\ntop_p = 1.5\n", "", "@:6:9: sampling.top_p must be in (0, 1], got 1.5"},
      {"[sampling]\ntop_p = 0\n", "", "@:6:9: sampling.top_p must be in (0, 1], got 0"},
      {"[sampling]\ntop_k = -1\n", "", "@:6:9: sampling.top_k must be an integer >= 0, got -1"},
      {"[sampling]\nmin_p = 1.25\n", "", "@:6:9: sampling.min_p must be in [0, 1], got 1.25"},
      {"[sampling]\nrepetition_penalty = 0\n", "", "@:6:22: sampling.repetition_penalty must be > 0, got 0"},
      {"[sampling]\nlogit_bias = [[3]]\n", "", "@:6:15: sampling.logit_bias elements must be [token, value], got [3]"},
      {"[sampling]\nbanned_tokens = [-1]\n", "", "sampling.banned_tokens element must be an integer >= 0, got -1"},
      {"[sampling]\nstop_strings = [\"\"]\n", "", "sampling.stop_strings: a stop string must hold 1 to 1024 bytes, got 0"},
      {"[sampling]\nstop_strings = [3]\n", "", "@:6:17: sampling.stop_strings element must be a string, got an integer (3)"},
      {"[sampling]\nbeam_width = 0\n", "", "@:6:14: sampling.beam_width must be an integer >= 1, got 0"},
      {"[sampling]\nlength_penalty = -1\n", "", "@:6:18: sampling.length_penalty must be >= 0, got -1"},
      {"[draft]\ngamma = 0\n", "", "@:6:9: draft.gamma must be an integer >= 1, got 0"},
      {"[draft]\nbudget = -3\n", "", "@:6:10: draft.budget must be an integer >= 0, got -3"},
      {"[draft]\ntree = [2, 0]\n", "", "@:6:12: draft.tree element must be an integer >= 1, got 0"},
      {"[draft]\nngram_min = 0\n", "", "@:6:13: draft.ngram_min must be an integer >= 1, got 0"},
      {"", "max_new_tokens = 0\n", "@:5:18: run.max_new_tokens must be an integer >= 1, got 0"},
      {"", "repetitions = 0\n", "@:5:15: run.repetitions must be an integer in [1, 1000], got 0"},
      {"", "repetitions = 100000000\n", "@:5:15: run.repetitions must be an integer in [1, 1000], got 100000000"},
      {"", "kv_block_size = 0\n", "@:5:17: run.kv_block_size must be an integer >= 1, got 0"},
      {"", "threads = -1\n", "@:5:11: run.threads must be an integer >= 0, got -1"},
      {"", "seeds = [-1]\n", "@:5:10: run.seeds element must be an integer >= 0, got -1"},
      {"", "seeds = []\n", "@:5:9: run.seeds must not be empty"},
      {"", "backend = \"tpu\"\n", "@:5:11: run.backend: unknown value 'tpu'"},
      {"", "kv_dtype = \"fp8\"\n", "@:5:12: run.kv_dtype: unknown value 'fp8'"},
  };
  for (const Case& c : cases) {
    INFO(c.tail << c.run_extra);
    require_error(minimal(c.tail, c.run_extra), {c.message});
  }
}

TEST_CASE("missing files and folders are errors naming the key", "[experiments]") {
  require_error("[target]\npath = \"/nonexistent/model\"\n[run]\nprompts = [\"hi\"]\n",
                {"@:2:8: target.path: '/nonexistent/model'", "is not a model folder (no config.json there)"});
  require_error(minimal("[draft]\nmethod = \"model\"\npath = \"no-such-draft\"\n"),
                {"@:7:8: draft.path: 'no-such-draft'", "is not a model folder"});
  require_error("[target]\npath = \"" + model_dir("target-16m") + "\"\n[run]\nprompts_file = \"missing.jsonl\"\n",
                {"@:4:16: run.prompts_file: file 'missing.jsonl'", "does not exist"});
  require_error("[run]\nprompts = [\"hi\"]\n", {"@: missing required key target.path"});
  require_error("[target]\npath = \"" + model_dir("target-16m") + "\"\n", {"@: missing run.prompts_file or run.prompts"});
  require_error("[target\npath = 1\n", {"@:1:", "TOML syntax error"});
  CHECK_THROWS_WITH(load_config("/nonexistent/config.toml"), Contains("config file '/nonexistent/config.toml' does not exist"));
}

TEST_CASE("checks across fields name the key, the file:line and the sweep point", "[experiments]") {
  const std::string draft = "[draft]\nmethod = \"model\"\npath = \"" + model_dir("draft-4m") + "\"\n";
  require_error(minimal(draft + "tree = [2, 2]\nbudget = 8\n"),
                {"@:9:10: draft.tree (a static tree) and draft.budget (a dynamic tree) exclude each other"});
  require_error(minimal("[draft]\nmethod = \"model\"\n"), {"@:6:10: draft.method model needs draft.path"});
  require_error(minimal(draft + "siblings = 2\ngamma_policy = \"load\"\n"),
                {"draft.siblings 2 adds candidates for the first token", "draft.gamma_policy load"});
  require_error(minimal("[draft]\nngram_min = 3\nngram_max = 2\n"), {"@:7:", "draft.ngram_max (2) must be >= draft.ngram_min (3)"});
  require_error(minimal(draft + "tree = [2, 2]\n[sweep]\n\"draft.budget\" = [0, 8]\n"),
                {"@:10:22: draft.tree (a static tree) and draft.budget", "(sweep point draft.budget=8)"});
  require_error(minimal("", "prompts_file = \"" + source_path("configs/prompts/dev.jsonl") + "\"\n"),
                {"@:4:", "run.prompts and run.prompts_file exclude each other"});
}

TEST_CASE("sweep errors name the sweep key or value and its file:line", "[experiments]") {
  require_error(minimal("[sweep]\n\"draft.gama\" = [1, 2]\n"), {"@:6:1: unknown key 'draft.gama'; did you mean 'draft.gamma'?"});
  require_error(minimal("[sweep]\n\"run.seeds\" = [[0], [1]]\n"), {"@:6:1: 'run.seeds' cannot be swept: every point shares it"});
  require_error(minimal("[sweep]\n\"draft.gamma\" = [1, 0]\n"), {"@:6:21: draft.gamma must be an integer >= 1, got 0"});
  require_error(minimal("[sweep]\n\"draft.gamma\" = 4\n"), {"@:6:", "sweep 'draft.gamma' must be a list of values, got 4"});
  require_error(minimal("[sweep]\n\"draft.gamma\" = []\n"), {"@:6:1: sweep 'draft.gamma' has no values"});
  require_error(minimal("[sweep]\ndraft = [{ gama = 2 }]\n"), {"@:6:", "unknown key 'draft.gama'; did you mean 'draft.gamma'?"});
  require_error(minimal("[sweep]\ndraft = [3]\n"), {"@:6:", "sweep 'draft' values must be tables of draft.* keys"});
  require_error(minimal("[sweep]\n\"draft.gamma\" = [1]\ndraft = [{ gamma = 2 }]\n"),
                {"@:7:", "sweep 'draft' sets draft.gamma, which sweep 'draft.gamma' sets too"});
}

TEST_CASE("run.domains filters the prompts file and suggests a domain it does not know", "[experiments]") {
  const std::string head = "[target]\npath = \"" + model_dir("target-16m") + "\"\n[run]\nprompts_file = \"" +
                           source_path("configs/prompts/dev.jsonl") + "\"\n";
  require_error(head + "domains = [\"pyton\"]\n", {"@:5:11: run.domains: no prompt has domain 'pyton'; did you mean 'python'?"});
  ScratchDir dir;
  const ExperimentConfig c = load_config(dir.write("ok.toml", head + "domains = [\"man\", \"c\"]\nprompts_per_domain = 3\n"));
  REQUIRE(c.prompts.size() == 6);
  CHECK(c.prompts[0].id == "c-dev-0");  // file order: the c prompts come before man
  CHECK(c.prompts[5].id == "man-dev-2");
}

TEST_CASE("bad prompts files name the file and line", "[experiments]") {
  ScratchDir dir;
  const std::string config = "[target]\npath = \"" + model_dir("target-16m") + "\"\n[run]\nprompts_file = \"p.jsonl\"\n";
  dir.write("p.jsonl", "{\"id\": \"a\", \"domain\": \"x\", \"prompt\": \"hi\"}\n{\"id\": \"b\", \"prompt\": \"yo\"}\n");
  const std::string file = dir.write("c.toml", config);
  CHECK_THROWS_WITH(load_config(file), Contains((dir.path() / "p.jsonl").string() + ":2: missing string field 'domain'"));
  dir.write("p.jsonl", "{\"id\": \"a\", \"domain\": \"x\", \"prompt\": \"hi\"}\n{\"id\": \"a\", \"domain\": \"x\", \"prompt\": \"yo\"}\n");
  CHECK_THROWS_WITH(load_config(file), Contains("prompt id 'a' appears twice"));
  dir.write("p.jsonl", "not json\n");
  CHECK_THROWS_WITH(load_config(file), Contains(":1: not a JSON object"));
}

TEST_CASE("chat prompts: messages in a prompts file or inline, exactly one of prompt and messages", "[experiments]") {
  ScratchDir dir;
  const std::string head = "[target]\npath = \"" + model_dir("target-16m") + "\"\n[run]\n";
  dir.write("p.jsonl",
            "{\"id\": \"t\", \"domain\": \"x\", \"prompt\": \"hi\"}\n"
            "{\"id\": \"c\", \"domain\": \"x\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
            "{\"role\": \"user\", \"content\": \"\"}]}\n");
  const ExperimentConfig c = load_config(dir.write("ok.toml", head + "prompts_file = \"p.jsonl\"\n"));
  REQUIRE(c.prompts.size() == 2);
  CHECK(c.prompts[0].text == "hi");
  CHECK(c.prompts[0].messages.empty());
  CHECK(c.prompts[1].text.empty());
  REQUIRE(c.prompts[1].messages.size() == 2);
  CHECK(c.prompts[1].messages[0].role == "system");
  CHECK(c.prompts[1].messages[0].content == "Be brief.");
  CHECK(c.prompts[1].messages[1].role == "user");
  CHECK(c.prompts[1].messages[1].content.empty());  // an empty turn is a valid chat

  const std::string file = dir.write("c.toml", head + "prompts_file = \"p.jsonl\"\n");
  const std::string where = (dir.path() / "p.jsonl").string() + ":1: ";
  const std::pair<std::string, std::string> bad_lines[] = {
      {R"({"id": "a", "domain": "x"})", "needs exactly one of 'prompt' (a string), 'messages' (a chat) and 'prompt_ids'"},
      {R"({"id": "a", "domain": "x", "prompt": "p", "prompt_ids": [1]})", "needs exactly one of 'prompt'"},
      {R"({"id": "a", "domain": "x", "prompt_ids": [1, -2]})", "'prompt_ids' holds -2, not a token id"},
      {R"({"id": "a", "domain": "x", "prompt_ids": []})", "'prompt_ids' must be a non-empty list of integers"},
      {R"({"id": "a", "domain": "x", "prompt": "p", "messages": []})", "needs exactly one of 'prompt'"},
      {R"({"id": "a", "domain": "x", "messages": []})", "field 'messages' must be a non-empty array of {role, content}, got []"},
      {R"({"id": "a", "domain": "x", "messages": [{"role": "user"}]})", "each of 'messages' must be {\"role\": string"},
      {R"({"id": "a", "domain": "x", "messages": [{"role": "user", "content": 3}]})", "got {\"content\":3,\"role\":\"user\"}"},
      {R"({"id": "a", "domain": "x", "prompt": 3})", "field 'prompt' must be a string, got 3"},
  };
  for (const auto& [line, message] : bad_lines) {
    INFO(line);
    dir.write("p.jsonl", line + "\n");
    CHECK_THROWS_WITH(load_config(file), Contains(where) && Contains(message));
  }

  // Inline: a table with messages; the resolved config writes them back and loads the same.
  const std::string inline_chat =
      head + "prompts = [{ id = \"q\", domain = \"d\", messages = [{ role = \"user\", content = \"Hi\" }] }]\n";
  const ExperimentConfig i = load_config(dir.write("inline.toml", inline_chat));
  REQUIRE(i.prompts.size() == 1);
  REQUIRE(i.prompts[0].messages.size() == 1);
  CHECK(i.prompts[0].messages[0].content == "Hi");
  CHECK_THAT(i.resolved_toml, Contains("messages"));
  const ExperimentConfig again = load_config(dir.write("resolved.toml", i.resolved_toml));
  REQUIRE(again.prompts.size() == 1);
  CHECK(again.prompts[0].messages[0].role == "user");
  CHECK(again.prompts[0].messages[0].content == "Hi");
  require_error(head + "prompts = [{ id = \"q\", prompt = \"p\", messages = [{ role = \"user\", content = \"Hi\" }] }]\n",
                {"@:4:", "a prompt table needs exactly one of 'prompt' and 'messages'"});
  require_error(head + "prompts = [{ id = \"q\", messages = [{ role = \"user\", text = \"Hi\" }] }]\n",
                {"@:4:", "run.prompts.messages: unknown key 'text'"});
  require_error(head + "prompts = [{ id = \"q\", messages = [] }]\n", {"@:4:", "run.prompts.messages must not be empty"});
  require_error(head + "prompts = [{ id = \"q\", messages = [{ role = \"user\" }] }]\n",
                {"@:4:", "a message needs 'role' and 'content'"});
}

TEST_CASE("relative paths resolve against the config file's folder", "[experiments]") {
  ScratchDir dir;
  dir.write("data/p.jsonl", "{\"id\": \"a\", \"domain\": \"x\", \"prompt\": \"hi\"}\n");
  const std::string file = dir.write("sub/cfg.toml", "[target]\npath = \"" + model_dir("target-16m") +
                                                          "\"\n[run]\nprompts_file = \"../data/p.jsonl\"\n");
  const ExperimentConfig c = load_config(file);
  CHECK(c.base.run.prompts_file == std::filesystem::weakly_canonical(dir.path() / "data/p.jsonl").string());
  CHECK(c.base.output.directory == std::filesystem::weakly_canonical(dir.path() / "sub/results/cfg").string());
  REQUIRE(c.prompts.size() == 1);
  CHECK(c.prompts[0].text == "hi");
}

TEST_CASE("defaults are filled in and written to the resolved config", "[experiments]") {
  ScratchDir dir;
  const ExperimentConfig c = load_config(dir.write("c.toml", minimal("[sampling]\ntemperature = 0.7\n")));
  CHECK(c.base.point.sampling.strategy == Strategy::kGreedy);
  CHECK(c.base.point.draft.method == DraftMethod::kNone);
  CHECK(c.base.point.max_new_tokens == 64);
  CHECK(c.base.run.seeds == std::vector<uint64_t>{0});
  CHECK(c.base.output.formats == std::vector<std::string>{"csv", "md", "png"});
  for (const char* line : {"temperature = 0.7", "strategy = \"greedy\"", "max_new_tokens = 64", "kv_block_size = 16",
                           "top_p = 1.0", "formats = [ \"csv\", \"md\", \"png\" ]", "[run]"}) {
    CHECK_THAT(c.resolved_toml, Contains(line));
  }
  REQUIRE(c.prompts.size() == 1);
  CHECK(c.prompts[0].id == "prompt-0");
  CHECK(c.prompts[0].domain == "inline");
}


}  // namespace

TEST_CASE("run.batch_size, run.request_rate and draft.gamma_policy parse, refuse bad values and join the run's settings",
          "[experiments][batched]") {
  ScratchDir dir;
  const std::string draft = "[draft]\nmethod = \"ngram\"\ngamma = 3\n";
  const ExperimentConfig c =
      load_config(dir.write("ok.toml", minimal(draft + "gamma_policy = \"load\"\n", "batch_size = 8\nrequest_rate = 2.5\n")));
  CHECK(c.base.point.batch_size == 8);
  CHECK(c.base.point.request_rate == 2.5);
  CHECK(c.base.point.gamma_policy == GammaPolicy::kLoad);
  CHECK(request_options(c.base.point).gamma_policy == GammaPolicy::kLoad);
  const nlohmann::json settings = canonical_settings(c.base.point);
  CHECK(settings.at("batch_size") == 8);
  CHECK(settings.at("request_rate") == 2.5);
  CHECK(settings.at("draft").at("gamma_policy") == "load");
  // The resolved config loads to the same settings.
  CHECK(canonical_settings(load_config(dir.write("resolved.toml", c.resolved_toml)).base.point) == settings);
  // Defaults leave the settings (and so every earlier run id) as they were.
  const nlohmann::json plain = canonical_settings(load_config(dir.write("plain.toml", minimal("", ""))).base.point);
  CHECK_FALSE(plain.contains("batch_size"));
  CHECK_FALSE(plain.contains("request_rate"));
  CHECK_FALSE(plain.at("draft").contains("gamma_policy"));

  // The baseline of a batched point runs at the same batch size, with the fixed policy.
  const Plan plan = make_plan(c);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[0].info.role == "baseline");
  CHECK(plan.runs[0].settings.at("batch_size") == 8);
  CHECK_FALSE(plan.runs[0].settings.at("draft").contains("gamma_policy"));
  CHECK(plan.runs[1].info.baseline == plan.runs[0].info.id);
  CHECK(plan.runs[1].info.variant == "load γ≤3");
  CHECK_THAT(plan.runs[1].info.label, Contains(" · batch 8"));
  // One job per (run, seed, repetition), over every prompt.
  REQUIRE(plan.jobs.size() == 2 * 3);
  for (const Job& j : plan.jobs) {
    CHECK(j.prompt == kAllPrompts);
    CHECK_THAT(j.key, Contains("/batch#"));
  }

  require_error(minimal("", "batch_size = -1\n"), {"@:5:14: run.batch_size must be an integer in [0, 4096], got -1"});
  require_error(minimal("", "batch_size = 5000\n"), {"run.batch_size must be an integer in [0, 4096], got 5000"});
  require_error(minimal("", "batch_size = 2.5\n"), {"run.batch_size must be an integer, got a float"});
  require_error(minimal("", "batch_size = 4\nrequest_rate = -1\n"), {"@:6:16: run.request_rate must be a number in [0, 1e+06], got -1"});
  require_error(minimal("", "batch_size = 4\nrequest_rate = \"fast\"\n"), {"run.request_rate must be a number, got a string"});
  require_error(minimal("", "request_rate = 2\n"), {"@:5:16: run.request_rate = 2: arrivals need a batched run; set run.batch_size >= 1"});
  require_error(minimal(draft + "gamma_policy = \"loud\"\n", ""), {"@:8:16: draft.gamma_policy: unknown value 'loud'; did you mean 'load'?"});
  require_error(minimal("[draft]\nmethod = \"ngram\"\ntree = [2, 1]\ngamma_policy = \"load\"\n", ""),
          {"draft.gamma_policy", "load chooses a chain's length each step: it needs a chain drafter"});
  require_error(minimal("[sweep]\n\"run.batch_size\" = [1, -4]\n", ""), {"run.batch_size must be an integer in [0, 4096], got -4"});
}

TEST_CASE("verify.rule and the threshold policy parse, sweep, label their runs and join their settings",
          "[experiments]") {
  ScratchDir dir;
  const std::string draft = "[draft]\nmethod = \"ngram\"\ngamma = 3\n";
  const ExperimentConfig c =
      load_config(dir.write("ok.toml", minimal(draft + "[sweep]\n\"verify.rule\" = [\"token\", \"block\"]\n")));
  const Plan plan = make_plan(c);
  REQUIRE(plan.runs.size() == 3);  // the baseline and one run per rule
  CHECK(plan.runs[0].info.role == "baseline");
  CHECK_FALSE(plan.runs[0].settings.contains("verify"));
  CHECK_FALSE(plan.runs[1].settings.contains("verify"));  // the default leaves earlier run ids as they were
  CHECK(plan.runs[2].settings.at("verify").at("rule") == "block");
  CHECK(plan.runs[1].info.variant == "γ=3");
  CHECK(plan.runs[2].info.variant == "γ=3 block");
  CHECK(plan.runs[1].info.label != plan.runs[2].info.label);
  const ExperimentConfig block = load_config(dir.write("block.toml", minimal(draft + "[verify]\nrule = \"block\"\n")));
  CHECK(request_options(block.base.point).verify_rule == VerifyRule::kBlock);
  CHECK(canonical_settings(load_config(dir.write("resolved.toml", block.resolved_toml)).base.point) ==
        canonical_settings(block.base.point));
  const ExperimentConfig threshold = load_config(dir.write(
      "threshold.toml", minimal(draft + "gamma_policy = \"threshold\"\nstop_below = 0.3\nmax_batch = 8\n")));
  CHECK(request_options(threshold.base.point).length_threshold.stop_below == 0.3);
  CHECK(request_options(threshold.base.point).length_threshold.max_batch == 8);
  CHECK(canonical_settings(threshold.base.point).at("draft").at("stop_below") == 0.3);
  CHECK(make_plan(threshold).runs[1].info.variant == "threshold γ≤3 p≥0.3 b≤8");
  CHECK(canonical_settings(load_config(dir.write("threshold-resolved.toml", threshold.resolved_toml)).base.point) ==
        canonical_settings(threshold.base.point));
  require_error(minimal(draft + "gamma_policy = \"threshold\"\nstop_below = 2\n"),
                {"draft.stop_below must be a number in [0, 1], got 2"});
  require_error(minimal(draft + "[verify]\nrule = \"blok\"\n"), {"verify.rule: unknown value 'blok'; did you mean 'block'?"});
  require_error(minimal("[draft]\nmethod = \"ngram\"\ngamma_policy = \"load\"\n[verify]\nrule = \"block\"\n"),
                {"verify.rule block verifies chains", "draft.gamma_policy load"});
  require_error(minimal("[sampling]\nstrategy = \"beam\"\n" + draft + "[verify]\nrule = \"traversal\"\n"),
                {"verify.rule traversal verifies drafted trees", "sampling.strategy beam"});
  const ExperimentConfig traversal = load_config(dir.write(
      "traversal.toml", minimal("[draft]\nmethod = \"ngram\"\ngamma_policy = \"load\"\n[verify]\nrule = \"traversal\"\n")));
  CHECK(request_options(traversal.base.point).verify_rule == VerifyRule::kTraversal);
}

TEST_CASE("draft.siblings parses, joins the run's settings and names its variant", "[experiments]") {
  ScratchDir dir;
  const std::string draft = "[draft]\nmethod = \"model\"\npath = \"" + model_dir("draft-1m") + "\"\ngamma = 2\n";
  const ExperimentConfig c = load_config(dir.write("ok.toml", minimal(draft + "siblings = 1\n", "")));
  CHECK(c.base.point.draft.siblings == 1);
  CHECK(request_options(c.base.point).draft.siblings == 1);
  CHECK(canonical_settings(c.base.point).at("draft").at("siblings") == 1);
  CHECK(canonical_settings(load_config(dir.write("resolved.toml", c.resolved_toml)).base.point) ==
        canonical_settings(c.base.point));
  // The default leaves the settings (and so every earlier run id) as they were.
  CHECK_FALSE(canonical_settings(load_config(dir.write("none.toml", minimal(draft, ""))).base.point)
                  .at("draft")
                  .contains("siblings"));
  const Plan plan = make_plan(c);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[1].info.variant == "γ=2 +1 sibling");
  CHECK(plan.runs[1].info.nodes == 3);
  require_error(minimal(draft + "siblings = -1\n", ""), {"draft.siblings must be an integer >= 0, got -1"});
  require_error(minimal("[draft]\nmethod = \"ngram\"\nsiblings = 1\n", ""),
                {"draft.siblings 1 adds candidates for the first token of a draft model's fixed-length chain"});
}

}  // namespace specula
