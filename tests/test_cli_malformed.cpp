// The malformed-input catalogue: the built `specula` run on broken model folders
// (config.json, generation_config.json, safetensors headers, the shard index, tokenizer
// files), experiment configs, prompt files, result directories and command lines. Every
// case must exit 1 with one line `specula: error: ...` that names the file, key or flag and
// the value, and leave every file that was there before byte for byte as it was.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModel = test::model_dir("draft-1m");

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A model folder `dir` of links to draft-1m's files, except those `replaced` names.
fs::path model_copy(const fs::path& dir, std::initializer_list<const char*> replaced = {}) {
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kModel)) {
    const std::string name = entry.path().filename().string();
    if (std::find_if(replaced.begin(), replaced.end(), [&](const char* r) { return name == r; }) == replaced.end())
      fs::create_symlink(entry.path(), dir / name);
  }
  return dir;
}

// draft-1m's config.json with `patch` merged in (a null value removes the key).
std::string config_with(const json& patch) {
  json j = json::parse(test::slurp(kModel + "/config.json"));
  j.merge_patch(patch);
  return j.dump();
}

// draft-1m's safetensors header (JSON) and data section.
std::pair<json, std::string> safetensors_parts() {
  const std::string bytes = test::slurp(kModel + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

std::string safetensors_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');  // the data 8-byte aligned, as writers pad it
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

// A model folder whose model.safetensors has the header `header` (text) over draft-1m's data.
fs::path model_with_header(const fs::path& dir, const std::string& header) {
  model_copy(dir, {"model.safetensors"});
  write(dir / "model.safetensors", safetensors_file(header, safetensors_parts().second));
  return dir;
}

fs::path model_with_header(const fs::path& dir, const std::function<void(json&)>& edit) {
  json header = safetensors_parts().first;
  edit(header);
  return model_with_header(dir, header.dump());
}

// A sharded model: draft-1m's model.safetensors as one shard named by `index`.
fs::path sharded_model(const fs::path& dir, const std::string& index) {
  model_copy(dir, {"model.safetensors"});
  fs::create_symlink(kModel + "/model.safetensors", dir / "shard-1.safetensors");
  write(dir / "model.safetensors.index.json", index);
  return dir;
}

std::string generate(const fs::path& model, const std::string& flags = "--prompt-ids 1,2 --max-new-tokens 2") {
  return "generate --model '" + model.string() + "' " + flags;
}
const std::string kGen = "generate --model '" + kModel + "' --prompt-ids 1,2 ";

// An experiment config over draft-1m with `extra` TOML appended (sections may repeat keys'
// tables only where TOML allows: the base has [target], [run] and [output]).
std::string experiment(const std::string& run_extra = "", const std::string& extra = "") {
  return "[target]\npath = \"" + kModel + "\"\n[run]\nprompts = [\"def f():\"]\nmax_new_tokens = 2\nrepetitions = 1\n" +
         run_extra + "[output]\nformats = [\"csv\"]\n" + extra;
}

std::string run_config(const fs::path& dir, const std::string& text, const std::string& flags = "--dry-run") {
  fs::create_directories(dir);
  write(dir / "config.toml", text);
  return "run '" + (dir / "config.toml").string() + "' --quiet --out '" + (dir / "out").string() + "' " + flags;
}

// An output directory holding results.jsonl with `lines` (each followed by a newline).
std::string run_into_results(const fs::path& dir, const std::string& lines) {
  fs::create_directories(dir / "out");
  write(dir / "out" / "results.jsonl", lines);
  return run_config(dir, experiment());
}

// A results line of the right shape, as the runner writes one.
json results_line() {
  return {{"key", "x/p#0/seed=0/rep=0"}, {"run", "x"}, {"run_index", 0}, {"role", "point"}, {"baseline", ""},
          {"drafter", "none"}, {"shape", "none"}, {"tree", ""}, {"gamma", 0}, {"nodes", 0}, {"variant", ""},
          {"strategy", "greedy"}, {"label", "target only"}, {"coords", json::object()}, {"prompt_id", "p"}, {"prompt_index", 0},
          {"domain", "inline"}, {"seed", 0u}, {"repetition", 0}, {"settings", json::object()},
          {"machine", {{"version", "v"}}}, {"stats", {{"new_tokens", 2}}}};
}

struct Case {
  const char* what;
  std::function<std::string(const fs::path& dir)> args;  // writes its files under dir, returns the arguments
  std::vector<std::string> names;                        // the file, key or flag and the value, in the message
};

std::vector<Case> catalogue() {
  std::vector<Case> c;
  const auto config_case = [&](const char* what, json patch, std::vector<std::string> names) {
    c.push_back({what, [patch](const fs::path& d) {
                   const fs::path m = model_copy(d / "m", {"config.json"});
                   write(m / "config.json", config_with(patch));
                   return generate(m);
                 },
                 std::move(names)});
  };
  const auto config_text_case = [&](const char* what, std::string text, std::vector<std::string> names) {
    c.push_back({what, [text](const fs::path& d) {
                   const fs::path m = model_copy(d / "m", {"config.json"});
                   write(m / "config.json", text);
                   return generate(m);
                 },
                 std::move(names)});
  };
  const auto flag_case = [&](const char* what, std::string flags, std::vector<std::string> names) {
    c.push_back({what, [flags](const fs::path&) { return kGen + flags; }, std::move(names)});
  };
  const auto header_case = [&](const char* what, std::function<void(json&)> edit, std::vector<std::string> names) {
    c.push_back({what, [edit](const fs::path& d) { return generate(model_with_header(d / "m", edit)); }, std::move(names)});
  };
  const auto toml_case = [&](const char* what, std::string text, std::vector<std::string> names) {
    c.push_back({what, [text](const fs::path& d) { return run_config(d, text); }, std::move(names)});
  };
  const auto prompts_case = [&](const char* what, std::string lines, std::vector<std::string> names) {
    c.push_back({what, [lines](const fs::path& d) {
                   fs::create_directories(d);
                   write(d / "prompts.jsonl", lines);
                   return run_config(d, "[target]\npath = \"" + kModel + "\"\n[run]\nprompts_file = \"prompts.jsonl\"\n");
                 },
                 std::move(names)});
  };
  const auto results_case = [&](const char* what, std::string lines, std::vector<std::string> names) {
    c.push_back({what, [lines](const fs::path& d) { return run_into_results(d, lines); }, std::move(names)});
  };

  // Model folders and config.json.
  c.push_back({"missing model folder", [](const fs::path& d) { return generate(d / "absent"); }, {"absent"}});
  c.push_back({"folder without config.json", [](const fs::path& d) { return generate(model_copy(d / "m", {"config.json"})); },
               {"config.json"}});
  config_text_case("config.json not JSON", "{\"hidden_size\": 128, ", {"config.json", "invalid JSON"});
  config_text_case("config.json number beyond a double", config_with(json::object()).replace(1, 0, "\"x\": 1e999, "),
                   {"config.json", "1e999"});
  config_text_case("config.json an array", "[1, 2]", {"config.json", "expected a JSON object"});
  config_case("rms_norm_eps beyond a float", {{"rms_norm_eps", 1e300}}, {"config.json", "rms_norm_eps", "1e+300"});
  config_case("rope_theta beyond a float", {{"rope_theta", -1e200}}, {"config.json", "rope_theta", "-1e+200"});
  config_case("negative hidden_size", {{"hidden_size", -128}}, {"config.json", "hidden_size", "-128"});
  config_case("hidden_size a string", {{"hidden_size", "128"}}, {"config.json", "hidden_size", "\"128\""});
  config_case("vocab_size beyond int", {{"vocab_size", 10000000000LL}}, {"config.json", "vocab_size", "10000000000"});
  config_case("model_type unknown", {{"model_type", "gpt2"}}, {"config.json", "model_type", "gpt2"});
  config_case("hidden_act not silu", {{"hidden_act", "gelu"}}, {"config.json", "hidden_act", "gelu"});
  config_case("kv heads do not divide heads", {{"num_key_value_heads", 3}}, {"config.json", "num_key_value_heads", "3"});
  config_case("rope_scaling yarn", {{"rope_scaling", {{"type", "yarn"}, {"factor", 2}}}}, {"config.json", "rope_scaling", "yarn"});
  config_case("eos_token_id negative", {{"eos_token_id", -1}}, {"config.json", "eos_token_id", "-1"});
  config_case("bos_token_id outside the vocabulary", {{"bos_token_id", 99999}}, {"config.json", "bos_token_id", "99999"});
  c.push_back({"config.json a folder", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"config.json"});
                 fs::create_directories(m / "config.json");
                 return generate(m);
               },
               {"config.json"}});
  c.push_back({"generation_config.json not JSON", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"generation_config.json"});
                 write(m / "generation_config.json", "{\"eos_token_id\": ");
                 return generate(m);
               },
               {"generation_config.json", "invalid JSON"}});
  c.push_back({"generation_config.json eos a string", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"generation_config.json"});
                 write(m / "generation_config.json", "{\"eos_token_id\": \"x\"}");
                 return generate(m);
               },
               {"generation_config.json", "eos_token_id", "\"x\""}});

  // Safetensors headers.
  c.push_back({"safetensors shorter than its length field", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"model.safetensors"});
                 write(m / "model.safetensors", "abc");
                 return generate(m);
               },
               {"model.safetensors", "truncated", "3 bytes"}});
  c.push_back({"safetensors header length past the end", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"model.safetensors"});
                 const uint64_t n = 1ULL << 40;
                 write(m / "model.safetensors", std::string(reinterpret_cast<const char*>(&n), 8) + "{}");
                 return generate(m);
               },
               {"model.safetensors", "header length", "1099511627776"}});
  c.push_back({"safetensors header not JSON", [](const fs::path& d) { return generate(model_with_header(d / "m", "{\"a\": ")); },
               {"model.safetensors", "not valid JSON"}});
  c.push_back({"safetensors header number beyond a double", [](const fs::path& d) {
                 std::string header = safetensors_parts().first.dump();
                 header.insert(1, "\"__metadata__\": {\"x\": 1e999}, ");
                 return generate(model_with_header(d / "m", header));
               },
               {"model.safetensors", "1e999"}});
  c.push_back({"safetensors duplicate tensor name", [](const fs::path& d) {
                 const json header = safetensors_parts().first;
                 std::string text = header.dump();
                 text.insert(1, "\"model.norm.weight\": " + header["model.norm.weight"].dump() + ", ");
                 return generate(model_with_header(d / "m", text));
               },
               {"model.safetensors", "model.norm.weight", "twice"}});
  header_case("safetensors dtype I8", [](json& h) { h["model.norm.weight"]["dtype"] = "I8"; },
              {"model.safetensors", "model.norm.weight", "I8"});
  header_case("safetensors offsets past the data", [](json& h) { h["model.norm.weight"]["data_offsets"] = {0, 1ULL << 40}; },
              {"model.safetensors", "model.norm.weight", "1099511627776"});
  header_case("safetensors bytes do not match the shape", [](json& h) { h["model.norm.weight"]["shape"] = {7}; },
              {"model.safetensors", "model.norm.weight", "[7]"});
  header_case("safetensors negative dimension", [](json& h) { h["model.norm.weight"]["shape"] = {-128}; },
              {"model.safetensors", "model.norm.weight", "-128"});
  header_case("safetensors shape overflowing", [](json& h) { h["model.norm.weight"]["shape"] = {1LL << 40, 1LL << 40}; },
              {"model.safetensors", "model.norm.weight", "too large"});
  header_case("safetensors tensor missing", [](json& h) { h.erase("model.norm.weight"); },
              {"missing tensor", "model.norm.weight"});
  c.push_back({"NaN weights under greedy decoding", [](const fs::path& d) {
                 auto [header, data] = safetensors_parts();
                 const auto& norm = header["model.norm.weight"];
                 const uint64_t begin = norm["data_offsets"][0].get<uint64_t>(), end = norm["data_offsets"][1].get<uint64_t>();
                 const float nan = std::nanf("");
                 for (uint64_t at = begin; at + 4 <= end; at += 4) std::memcpy(&data[at], &nan, 4);
                 const fs::path m = model_copy(d / "m", {"model.safetensors"});
                 write(m / "model.safetensors", safetensors_file(header.dump(), data));
                 return generate(m);
               },
               {"logit", "nan"}});
  header_case("safetensors header not an object", [](json& h) { h = json::array({1}); },
              {"model.safetensors", "JSON object"});

  // The shard index.
  c.push_back({"index not JSON", [](const fs::path& d) { return generate(sharded_model(d / "m", "{\"weight_map\": ")); },
               {"model.safetensors.index.json", "invalid JSON"}});
  c.push_back({"index number beyond a double", [](const fs::path& d) {
                 return generate(sharded_model(d / "m", "{\"metadata\": {\"total_size\": 1e999}, \"weight_map\": {}}"));
               },
               {"model.safetensors.index.json", "1e999"}});
  c.push_back({"index without weight_map", [](const fs::path& d) { return generate(sharded_model(d / "m", "{}")); },
               {"model.safetensors.index.json", "weight_map"}});
  c.push_back({"index shard not a string", [](const fs::path& d) {
                 return generate(sharded_model(d / "m", "{\"weight_map\": {\"model.norm.weight\": 3}}"));
               },
               {"model.safetensors.index.json", "model.norm.weight"}});
  c.push_back({"index shard in another folder", [](const fs::path& d) {
                 return generate(sharded_model(d / "m", "{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}"));
               },
               {"model.safetensors.index.json", "../x.safetensors"}});
  c.push_back({"index names an absent shard", [](const fs::path& d) {
                 return generate(sharded_model(d / "m", "{\"weight_map\": {\"model.norm.weight\": \"absent.safetensors\"}}"));
               },
               {"absent.safetensors", "cannot open"}});

  // Tokenizer files.
  c.push_back({"no tokenizer", [](const fs::path& d) { return generate(model_copy(d / "m", {"tokenizer.model"})); },
               {"no tokenizer.model or tokenizer.json"}});
  c.push_back({"tokenizer.model a folder", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"tokenizer.model"});
                 fs::create_directories(m / "tokenizer.model");
                 return generate(m);
               },
               {"tokenizer.model", "not a file"}});
  c.push_back({"tokenizer.model garbage", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"tokenizer.model"});
                 write(m / "tokenizer.model", "not a protobuf");
                 return generate(m);
               },
               {"tokenizer.model", "cannot load SentencePiece"}});
  c.push_back({"tokenizer.json not JSON", [](const fs::path& d) {
                 const fs::path m = model_copy(d / "m", {"tokenizer.model"});
                 write(m / "tokenizer.json", "{\"model\": ");
                 return generate(m);
               },
               {"tokenizer.json", "not valid JSON"}});
  c.push_back({"make-checkpoint tokenizer a folder", [](const fs::path& d) {
                 fs::create_directories(d / "tok");
                 return "make-checkpoint --shape draft-1m --out '" + (d / "ck").string() + "' --tokenizer '" +
                        (d / "tok").string() + "'";
               },
               {"tok", "not a file"}});

  // Command-line flags.
  flag_case("unknown flag", "--frobnicate", {"--frobnicate"});
  flag_case("flag value not a number", "--gamma many", {"--gamma", "many"});
  flag_case("threads far above the cap", "--threads 100000", {"--threads", "100000"});
  flag_case("negative threads", "--threads -1", {"--threads", "-1"});
  flag_case("negative KV pool", "--kv-pool-blocks -3", {"--kv-pool-blocks", "-3"});
  flag_case("KV pool below one request's need", "--kv-pool-blocks 2", {"--kv-pool-blocks", "2", "alone"});
  flag_case("KV pool with beam search", "--sampler beam --kv-pool-blocks 100", {"--kv-pool-blocks", "100", "beam"});
  flag_case("gamma of a million", "--draft '" + kModel + "' --gamma 1000000", {"--gamma", "1000000"});
  flag_case("a tree of 266304 nodes", "--draft '" + kModel + "' --tree 64,64,64", {"--tree", "266304"});
  flag_case("tree budget above the cap", "--draft '" + kModel + "' --tree-budget 100000", {"--tree-budget", "100000"});
  flag_case("sequoia probabilities not numbers", "--draft '" + kModel + "' --tree-budget 8 --sequoia 0.5,x",
            {"--sequoia", "'x'"});
  flag_case("sequoia row summing above 1", "--draft '" + kModel + "' --tree-budget 8 --sequoia 0.7,0.4",
            {"--sequoia", "sums to 1.1"});
  flag_case("sequoia without a budget", "--draft '" + kModel + "' --sequoia 0.5", {"--sequoia", "--tree-budget"});
  flag_case("sequoia budget above its cap", "--draft '" + kModel + "' --tree-budget 200 --sequoia 0.5",
            {"--sequoia", "--tree-budget", "200"});
  flag_case("beam width above the cap", "--sampler beam --beam-width 100000", {"--beam-width", "100000"});
  flag_case("block size above the cap", "--kv-block-size 100000", {"--kv-block-size", "100000"});
  flag_case("max new tokens near INT_MAX", "--max-new-tokens 2147483647", {"--max-new-tokens", "2147483647"});
  flag_case("zero samples", "--num-samples 0", {"--num-samples", "0"});
  flag_case("negative siblings", "--draft '" + kModel + "' --siblings -1", {"--siblings", "-1"});
  flag_case("siblings with n-grams", "--draft-method ngram --siblings 1", {"--siblings", "--draft"});
  flag_case("siblings with a static tree", "--draft '" + kModel + "' --tree 2,2 --siblings 1", {"--siblings", "--tree"});
  flag_case("block verification of a tree", "--draft '" + kModel + "' --tree 2,2 --verify-rule block",
            {"--verify-rule block verifies chains", "--tree"});
  flag_case("block verification with siblings", "--draft '" + kModel + "' --siblings 1 --verify-rule block",
            {"--verify-rule block", "--siblings"});
  flag_case("traversal verification with beam search", "--draft '" + kModel + "' --sampler beam --verify-rule traversal",
            {"--verify-rule traversal verifies drafted trees", "--sampler beam"});
  flag_case("verify rule without a drafter", "--verify-rule token", {"--verify-rule", "does not apply"});
  flag_case("verify rule unknown", "--draft '" + kModel + "' --verify-rule blok", {"--verify-rule", "'blok'"});
  flag_case("logprobs without --json", "--logprobs 2", {"--logprobs needs --json"});
  flag_case("logprobs source without logprobs", "--json --logprobs-source processed",
            {"--logprobs-source does not apply", "--logprobs"});
  flag_case("logprobs source unknown", "--json --logprobs 1 --logprobs-source cooked", {"--logprobs-source", "'cooked'"});
  flag_case("logprobs above the maximum", "--json --logprobs 21", {"--logprobs", "21"});
  flag_case("repetition penalty 0", "--repetition-penalty 0", {"--repetition-penalty must be > 0", "got 0"});
  flag_case("presence penalty above 2", "--presence-penalty 2.5", {"--presence-penalty must be in [-2, 2]", "2.5"});
  flag_case("logit bias without a value", "--logit-bias 13", {"--logit-bias", "'13' is not ID:VALUE"});
  flag_case("logit bias outside the vocabulary", "--logit-bias 5000:1.5", {"--logit-bias", "token 5000", "[0, 4096)"});
  flag_case("banned token not an integer", "--banned-tokens 3,x", {"--banned-tokens", "'x' is not an integer"});
  flag_case("min new tokens negative", "--min-new-tokens -1", {"--min-new-tokens must be >= 0", "-1"});
  flag_case("logprobs with beam search", "--sampler beam --json --logprobs 1",
            {"--logprobs", "does not apply to --sampler beam"});
  flag_case("stop-below above 1", "--draft '" + kModel + "' --gamma-policy threshold --stop-below 1.5",
            {"--stop-below", "1.5"});
  flag_case("draft-max-batch negative", "--draft '" + kModel + "' --gamma-policy threshold --draft-max-batch -2",
            {"--draft-max-batch", "-2"});
  flag_case("stop-below without the threshold policy", "--draft '" + kModel + "' --stop-below 0.5",
            {"--stop-below", "does not apply", "--gamma-policy threshold"});
  flag_case("threshold policy on a tree", "--draft '" + kModel + "' --tree 2,2 --gamma-policy threshold",
            {"--gamma-policy threshold", "chain drafter"});
  flag_case("siblings under the load policy", "--draft '" + kModel + "' --gamma-policy load --siblings 1",
            {"--siblings", "--gamma-policy"});
  flag_case("tree with a tree budget", "--draft '" + kModel + "' --tree 2,2 --tree-budget 8", {"--tree", "--tree-budget"});
  flag_case("tree with adaptive", "--draft '" + kModel + "' --tree 2,2 --adaptive", {"--adaptive", "--tree"});
  flag_case("tree with n-grams", "--draft-method ngram --tree 2,2", {"--draft-method", "ngram", "--tree"});
  flag_case("draft model with n-grams", "--draft '" + kModel + "' --draft-method ngram", {"--draft", "ngram"});
  flag_case("gamma without a drafter", "--gamma 3", {"--gamma", "does not apply"});
  flag_case("gamma with a static tree", "--draft '" + kModel + "' --tree 2 --gamma 3", {"--gamma", "does not apply"});
  flag_case("temperature without sampling", "--temperature 0.5", {"--temperature", "--sampler sample"});
  flag_case("top-k without sampling", "--top-k 5", {"--top-k", "--sampler sample"});
  flag_case("seed without sampling", "--seed 3", {"--seed", "--sampler sample"});
  flag_case("negative seed", "--sampler sample --seed -1", {"--seed", "-1"});
  flag_case("temperature too small", "--sampler sample --temperature 1e-30", {"--temperature", "1e-30"});
  flag_case("top-p zero", "--sampler sample --top-p 0", {"--top-p", "0"});
  flag_case("beam width without beam", "--beam-width 2", {"--beam-width", "--sampler beam"});
  flag_case("n-gram sizes without n-grams", "--ngram-max 5", {"--ngram-max", "--draft-method ngram"});
  flag_case("draft weights without a draft", "--draft-weights f16", {"--draft-weights", "--draft"});
  flag_case("tree without a drafter", "--tree 2,2", {"--tree", "needs a drafter"});
  flag_case("backend cuda", "--backend cuda", {"--backend", "cuda"});
  c.push_back({"prompt id outside the vocabulary", [](const fs::path&) { return generate(kModel, "--prompt-ids 1,99999"); },
               {"--prompt", "99999"}});
  c.push_back({"make-checkpoint beyond memory and disk", [](const fs::path& d) {
                 return "make-checkpoint --shape draft-1m --hidden 1048576 --vocab 1048576 --out '" + (d / "ck").string() + "'";
               },
               {"hidden_size 1048576", "vocab_size 1048576", "GiB"}});
  c.push_back({"make-checkpoint over an existing checkpoint", [](const fs::path& d) {
                 fs::create_directories(d / "ck");
                 write(d / "ck" / "config.json", "{}");
                 return "make-checkpoint --shape draft-1m --out '" + (d / "ck").string() + "'";
               },
               {"ck", "config.json"}});
  c.push_back({"make-checkpoint unknown dtype", [](const fs::path& d) {
                 return "make-checkpoint --shape draft-1m --dtype int8 --out '" + (d / "ck").string() + "'";
               },
               {"--dtype", "int8"}});

  // Experiment configs (TOML).
  toml_case("config not TOML", "[target\npath = 1\n", {"config.toml:1"});
  toml_case("unknown key", experiment("gama = 3\n"), {"config.toml:", "gama"});
  toml_case("repetitions of a hundred million", experiment("", "").replace(experiment().find("repetitions = 1"), 15,
                                                                           "repetitions = 100000000"),
            {"config.toml:", "run.repetitions", "100000000"});
  toml_case("top_p that is 0 as a float", experiment("", "[sampling]\nstrategy = \"sample\"\ntop_p = 1e-300\n"),
            {"config.toml:", "sampling.top_p", "1e-300"});
  toml_case("threads far above the cap", experiment("threads = 100000\n"), {"config.toml:", "run.threads", "100000"});
  toml_case("gamma of a million", experiment("", "[draft]\nmethod = \"ngram\"\ngamma = 1000000\n"),
            {"config.toml:", "draft.gamma", "1000000"});
  toml_case("a tree of 266304 nodes", experiment("", "[draft]\npath = \"" + kModel + "\"\nmethod = \"model\"\ntree = [64, 64, 64]\n"),
            {"config.toml:", "draft.tree", "266304"});
  toml_case("backend cuda", experiment("backend = \"cuda\"\n"), {"config.toml:", "run.backend", "cuda"});
  // A name longer than the file system allows (fuzz_toml_config found the sweep's throwing).
  const std::string too_long(300, 'x');
  toml_case("a draft path with a 300-character name",
            experiment("", "[draft]\nmethod = \"model\"\npath = \"" + too_long + "\"\n"),
            {"config.toml:", "draft.path", too_long});
  toml_case("a swept draft path with a 300-character name",
            experiment("", "[sweep]\ndraft = [{ name = \"d\", method = \"model\", path = \"" + too_long + "\" }]\n"),
            {"config.toml:", "draft.path", too_long});
  toml_case("KV pool negative", experiment("kv_pool_blocks = -1\n"), {"config.toml:", "run.kv_pool_blocks", "-1"});
  toml_case("KV pool below one request's need", experiment("kv_pool_blocks = 2\n"),
            {"config.toml:", "run.kv_pool_blocks", "2", "alone"});
  toml_case("batch size far above the cap", experiment("batch_size = 100000\n"), {"config.toml:", "run.batch_size", "100000"});
  toml_case("request rate NaN", experiment("batch_size = 2\nrequest_rate = nan\n"), {"config.toml:", "run.request_rate", "nan"});
  toml_case("request rate without a batch", experiment("request_rate = 3\n"), {"config.toml:", "run.request_rate", "run.batch_size"});
  toml_case("gamma policy unknown", experiment("", "[draft]\nmethod = \"ngram\"\ngamma_policy = \"lod\"\n"),
            {"config.toml:", "draft.gamma_policy", "'lod'"});
  toml_case("verify rule unknown", experiment("", "[draft]\nmethod = \"ngram\"\n[verify]\nrule = \"blk\"\n"),
            {"config.toml:", "verify.rule", "'blk'"});
  toml_case("block verification of a swept tree",
            experiment("", "[draft]\nmethod = \"ngram\"\n[verify]\nrule = \"block\"\n[sweep]\n\"draft.budget\" = [4]\n"),
            {"verify.rule block verifies chains", "draft.budget"});
  toml_case("target not a model", "[target]\npath = \"/nonexistent\"\n", {"config.toml:", "target.path", "/nonexistent"});
  toml_case("sequoia row not numbers", experiment("", "[draft]\nmethod = \"model\"\npath = \"" + kModel +
                                                  "\"\nbudget = 8\nsequoia = [[0.5, \"a\"]]\n"),
            {"config.toml:", "draft.sequoia", "numbers, got a"});
  toml_case("sequoia with a static tree", experiment("", "[draft]\nmethod = \"model\"\npath = \"" + kModel +
                                                    "\"\ntree = [2, 2]\nsequoia = [[0.5]]\n"),
            {"config.toml:", "draft.sequoia", "draft.tree"});
  c.push_back({"run --shard out of range", [](const fs::path& d) { return run_config(d, experiment(), "--shard 3/3"); },
               {"--shard", "'3/3'"}});
  c.push_back({"run --shard not I/N", [](const fs::path& d) { return run_config(d, experiment(), "--shard two"); },
               {"--shard", "'two'"}});

  // Prompt files.
  prompts_case("prompt line not JSON", "{\"id\": \"a\", \"domain\": \"d\", \"prompt\": \"x\"}\n{oops\n",
               {"prompts.jsonl:2", "not a JSON object"});
  prompts_case("prompt line without its text", "{\"id\": \"a\", \"domain\": \"d\"}\n", {"prompts.jsonl:1", "prompt"});
  prompts_case("no prompts", "\n\n", {"prompts.jsonl", "no prompts"});
  prompts_case("prompt id twice", "{\"id\": \"a\", \"domain\": \"d\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"domain\": \"d\", \"prompt\": \"y\"}\n",
               {"prompts.jsonl:2", "'a'", "twice"});

  // Result directories.
  results_case("results line not JSON", "{oops\n", {"results.jsonl:1", "not a JSON object"});
  {
    json line = results_line();
    line.erase("run");
    results_case("results line without its run", line.dump() + "\n", {"results.jsonl:1", "'run'"});
    line = results_line();
    line["seed"] = "zero";
    results_case("results line seed a string", line.dump() + "\n", {"results.jsonl:1", "seed", "\"zero\""});
    line = results_line();
    line["stats"]["accepted_per_depth"] = {"a"};
    results_case("results line depth shares not numbers", line.dump() + "\n", {"results.jsonl:1", "accepted_per_depth"});
    results_case("results of another config", results_line().dump() + "\n", {"results.jsonl", "x/p#0/seed=0/rep=0"});
    line = results_line();
    line.erase("stats");
    c.push_back({"report of a results line without stats", [line](const fs::path& d) {
                   fs::create_directories(d);
                   write(d / "results.jsonl", line.dump() + "\n");
                   return "report '" + d.string() + "'";
                 },
                 {"results.jsonl:1", "'stats'"}});
  }
  c.push_back({"report of a folder without results", [](const fs::path& d) {
                 fs::create_directories(d);
                 return "report '" + d.string() + "'";
               },
               {"results.jsonl", "no results"}});
  return c;
}

// Every regular file under `dir` (links followed) and its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink()) files[e.path().string()] = test::slurp(e.path());  // links: the bundled models
  return files;
}

}  // namespace

TEST_CASE("cli: every malformed input exits 1 with one line naming the file, key or flag and the value",
          "[cli][malformed]") {
  const test::TempDir root;
  const std::vector<Case> cases = catalogue();
  CHECK(cases.size() >= 60);
  int index = 0;
  for (const Case& c : cases) {
    const fs::path dir = root.path / ("case-" + std::to_string(index++));
    fs::create_directories(dir);
    const std::string args = c.args(dir);
    const auto before = snapshot(dir);
    const test::Outcome o = test::run_specula(args);
    INFO(c.what << "\nspecula " << args << "\nstderr: " << o.err);
    CHECK(o.exited);
    CHECK(o.status == 1);
    CHECK(o.err.starts_with("specula: error: "));
    CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
    CHECK(o.err.back() == '\n');
    for (const std::string& name : c.names) CHECK_THAT(o.err, Catch::Contains(name));
    const auto after = snapshot(dir);
    for (const auto& [path, bytes] : before) {  // nothing that was there changed
      INFO(path);
      CHECK(after.count(path) == 1);
      CHECK((after.count(path) && after.at(path) == bytes));
    }
    if (std::string(c.what).starts_with("make-checkpoint")) CHECK_FALSE(fs::exists(dir / "ck" / "model.safetensors"));
  }
}

TEST_CASE("cli: an unknown command is refused by its name", "[cli][malformed]") {
  const test::Outcome o = test::run_specula("train --epochs 3");
  CHECK(o.exited);
  CHECK(o.status == 1);
  CHECK(o.out.empty());
  CHECK(o.err == "specula: error: unknown command 'train'\n");
}

TEST_CASE("cli: a second run into a locked output directory is refused and writes nothing", "[cli][malformed]") {
  const test::TempDir dir;
  const std::string args = run_config(dir.path, experiment(), "");
  fs::create_directories(dir.path / "out");
  const std::string lock = (dir.path / "out" / ".specula.lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);  // as a running `specula run` holds it
  const test::Outcome o = test::run_specula(args);
  ::close(fd);
  INFO("stderr: " << o.err);
  CHECK(o.status == 1);
  CHECK_THAT(o.err, Catch::Contains("another specula run") && Catch::Contains(".specula.lock"));
  CHECK_FALSE(fs::exists(dir.path / "out" / "results.jsonl"));
  // Released: the same command runs.
  const test::Outcome again = test::run_specula(args);
  INFO("stderr: " << again.err);
  CHECK(again.status == 0);
  CHECK(fs::exists(dir.path / "out" / "results.jsonl"));
}

}  // namespace specula
