// `specula generate`, `specula run` and `specula make-checkpoint` from the outside: the built
// binary is run as a user would run it. Bad input (missing model folder, corrupt config, a
// prompt longer than max_position_embeddings, an unknown flag, bad --prompt-ids, a bad
// checkpoint request) exits with a non-zero status (not a signal) and one clear line on
// stderr naming what is wrong; good input prints the documented JSON object, or the text
// with one stats line on stderr; SIGINT stops `specula run` between jobs with status 130 and
// the rerun completes the uninterrupted results.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

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

struct Outcome {
  bool exited = false;  // false: killed by a signal
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `specula <args>` (args are shell words, already quoted where needed).
Outcome run_specula(const std::string& args) {
  static int counter = 0;
  const fs::path base = fs::temp_directory_path() /
                        ("specula-test-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  const std::string command = std::string("'") + SPECULA_BINARY + "' " + args + " >'" + base.string() +
                              ".out' 2>'" + base.string() + ".err' </dev/null";
  const int raw = std::system(command.c_str());
  Outcome o;
  o.exited = raw != -1 && WIFEXITED(raw);
  o.status = o.exited ? WEXITSTATUS(raw) : -1;
  o.out = slurp(base.string() + ".out");
  o.err = slurp(base.string() + ".err");
  fs::remove(base.string() + ".out");
  fs::remove(base.string() + ".err");
  return o;
}

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
  for (const char* key : {"prompt_tokens", "new_tokens", "time_s", "prefill_tokens_per_s", "decode_tokens_per_s"})
    CHECK(j.at("stats").contains(key));
  CHECK(j.at("stats").at("prompt_tokens") == 3);
  CHECK(j.at("stats").at("kv").at("block_size") == 16);
  CHECK(j.at("stats").at("kv").at("blocks_in_use_at_end") == 0);
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
    for (const char* timing : {"time_s", "prefill_tokens_per_s", "decode_tokens_per_s", "time_breakdown"}) stats.erase(timing);
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
       "--draft-weights must be stored, f32, f16 or bf16, got 'int4'"},
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
