// Per-request options of a `specula generate --prompts-file` line (experiments/prompt_options.h):
// each line's result equals a lone `generate` with the same settings as flags; every config
// value type converts (numbers, strings, lists, lists of pairs, booleans) and a path resolves
// against the prompts file's folder; keys shared by the batch, unknown keys, bad values and
// keys that do not apply are refused naming "options.KEY", and an experiment refuses the field.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "experiments/prompt_options.h"
#include "tests/test_experiments_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("prompt options: every value type converts, paths resolve against the file, the rest stays",
          "[experiments]") {
  GenerateOptions o;
  o.prompt_ids = {1, 2};
  o.seed = 9;
  o.num_samples = 2;
  o.max_new_tokens = 40;
  const std::filesystem::path models = std::filesystem::path(test::model_dir("draft-1m")).parent_path();
  apply_prompt_options(nlohmann::json::parse(R"({"sampling.strategy": "sample", "sampling.temperature": 0.5,
      "sampling.logit_bias": [[3, -1.5]], "sampling.stop_strings": ["\n"], "draft.method": "model",
      "draft.path": "draft-1m", "draft.adaptive": true, "output.logprobs": 2})"),
                       o, models);
  CHECK(o.sampling.strategy == Strategy::kSample);
  CHECK(o.sampling.temperature == 0.5f);
  CHECK(o.controls.logit_bias == std::vector<std::pair<int, float>>{{3, -1.5f}});
  CHECK(o.stop_strings == std::vector<std::string>{"\n"});
  CHECK(o.draft.method == DraftMethod::kModel);
  CHECK(std::filesystem::equivalent(o.draft.model_dir, test::model_dir("draft-1m")));
  CHECK(o.draft.adaptive);
  CHECK(o.logprobs == 2);
  CHECK(o.prompt_ids == std::vector<int>{1, 2});  // what no key sets stays
  CHECK(o.seed == 9);
  CHECK(o.num_samples == 2);
  CHECK(o.max_new_tokens == 40);
  const OptionNames names = prompt_option_names(nlohmann::json::parse(R"({"draft.gamma": 2})"), cli_option_names());
  CHECK(names.name("draft.gamma") == "options.draft.gamma");
  CHECK(names.given("draft.gamma"));
  CHECK(names.name("draft.budget") == "--tree-budget");
  CHECK_THROWS_WITH(apply_prompt_options(nlohmann::json::parse(R"({"run.batch_size": 2})"), o, "."),
                    Catch::Contains("options.run.batch_size is shared by every request of the batch"));
}

TEST_CASE("prompt options: each line's result equals a lone generate with the same flags", "[cli]") {
  test::ScratchDir dir;
  const std::string file = dir.write("p.jsonl",
      "{\"id\": \"plain\", \"prompt\": \"def main():\"}\n"
      "{\"id\": \"short\", \"prompt\": \"def main():\", \"options\": {\"run.max_new_tokens\": 5, "
      "\"sampling.stop_strings\": [\"zzz\"]}}\n"
      "{\"id\": \"ngram\", \"prompt\": \"int x\", \"options\": {\"draft.method\": \"ngram\", \"draft.gamma\": 2, "
      "\"sampling.no_repeat_ngram_size\": 2, \"output.logprobs\": 1}}\n"
      "{\"id\": \"sampled\", \"prompt\": \"int x\", \"options\": {\"sampling.strategy\": \"sample\", "
      "\"sampling.temperature\": 0.7, \"sampling.stop_strings\": [\"(\"]}}\n");
  const std::string gen = "generate --model '" + test::model_dir("target-16m") + "' --json ";
  const test::Outcome batch = test::run_specula(gen + "--max-new-tokens 16 --batch-size 4 --prompts-file '" + file + "'");
  INFO(batch.err);
  REQUIRE(batch.status == 0);
  const std::vector<nlohmann::json> got = json_lines(batch.out);
  REQUIRE(got.size() == 5);  // four requests, then the summary
  const std::vector<std::string> alone = {
      "--max-new-tokens 16 --prompt 'def main():'",
      "--max-new-tokens 5 --prompt 'def main():' --stop zzz",
      "--max-new-tokens 16 --prompt 'int x' --draft-method ngram --gamma 2 --no-repeat-ngram-size 2 --logprobs 1",
  };
  for (std::size_t i = 0; i < alone.size(); ++i) {
    INFO(alone[i]);
    const test::Outcome one = test::run_specula(gen + alone[i]);
    REQUIRE(one.status == 0);
    const nlohmann::json want = nlohmann::json::parse(one.out);
    CHECK(got[i]["ids"] == want["ids"]);
    CHECK(got[i]["text"] == want["text"]);
    CHECK(got[i]["finish_reason"] == want["finish_reason"]);
    CHECK(got[i].contains("logprobs") == want.contains("logprobs"));
    if (want.contains("logprobs")) CHECK(got[i]["logprobs"] == want["logprobs"]);
  }
  CHECK(got[1]["ids"].size() == 5);
  CHECK(got[2]["stats"]["draft"]["method"] == "ngram");
  // A batch keys each request's random stream by its index, so a sampled line is checked by its settings.
  CHECK(got[3]["stats"]["sampler"]["temperature"] == 0.7f);
  CHECK(got[3]["text"].get<std::string>().find('(') == std::string::npos);
  CHECK(got[3]["finish_reason"] == (got[3]["stop_string"].is_null() ? "length" : "stop_string"));
}

TEST_CASE("prompt options: refusals name the line and options.KEY", "[cli]") {
  test::ScratchDir dir;
  struct Case {
    std::string options, flags, message;
  };
  const std::vector<Case> cases = {
      {R"({"run.threads": 2})", "", "options.run.threads is shared by every request of the batch"},
      {R"({"sampling.temprature": 2})", "", "options: unknown key 'sampling.temprature'; did you mean 'sampling.temperature'?"},
      {R"({"sampling.temperature": -1})", "", "options.sampling.temperature must be >= 0, got -1"},
      {R"({"sampling.temperature": null})", "", "options.sampling.temperature is null"},
      {R"([1])", "", "options must be an object of config keys, got [1]"},
      {R"({"sampling.top_k": 5})", "", "options.sampling.top_k does not apply: it needs --sampler sample"},
      {R"({"output.logprobs": 2})", "", "options.output.logprobs needs --json"},
      {R"({"sampling.stop_strings": [""]})", "", "options.sampling.stop_strings: a stop string must hold 1 to 1024 bytes"},
      {R"({"draft.path": "nowhere"})", "", "options.draft.path: 'nowhere'"},
      {R"({"sampling.strategy": "beam"})", "--logprobs 1 --json", "--logprobs does not apply to options.sampling.strategy beam"},
  };
  for (const Case& c : cases) {
    const std::string file = dir.write("bad.jsonl", "{\"id\": \"x\", \"prompt\": \"hi\", \"options\": " + c.options + "}\n");
    const test::Outcome o = test::run_specula("generate --model '" + test::model_dir("target-16m") + "' --prompts-file '" +
                                              file + "' " + c.flags);
    INFO(c.options);
    CHECK(o.status != 0);
    CHECK_THAT(o.err, Catch::Contains("bad.jsonl:1 (x): " + c.message));
  }
  // An experiment's prompts carry no per-request options.
  const std::string prompts = dir.write("exp.jsonl", "{\"id\": \"x\", \"domain\": \"d\", \"prompt\": \"hi\", \"options\": {}}\n");
  const std::string config = dir.write("exp.toml", "[target]\npath = \"" + test::model_dir("target-16m") +
                                                        "\"\n[run]\nprompts_file = \"" + prompts + "\"\n");
  CHECK_THAT(test::run_specula("run --dry-run '" + config + "'").err,
             Catch::Contains("prompt 'x' has per-request 'options'"));
}

}  // namespace specula
