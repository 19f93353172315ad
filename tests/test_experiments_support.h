// defines: helpers of the [experiments] tests — ScratchDir (a temporary folder that
// removes itself), tiny_config() (a small valid config on the bundled models), and
// FakeBackend, a deterministic GenerationBackend whose calls are counted.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/error.h"
#include "experiments/backend.h"
#include "tests/test_support.h"

namespace specula::test {

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("specula-experiments-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to <scratch>/<name> and returns that path.
  std::string write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// A config on the bundled models with three inline prompts in two domains, two seeds and
// a γ sweep; `extra` is appended (more keys or sections).
inline std::string tiny_config(const std::string& extra = "") {
  return "title = \"tiny\"\n"
         "[target]\npath = \"" + model_dir("target-16m") + "\"\n"
         "[draft]\nmethod = \"model\"\npath = \"" + model_dir("draft-4m") + "\"\n"
         "[run]\n"
         "prompts = [{ id = \"a\", domain = \"x\", prompt = \"hello\" },\n"
         "           { id = \"b\", domain = \"y\", prompt = \"world!\" },\n"
         "           { id = \"c\", domain = \"x\", prompt = \"foo bar\" }]\n"
         "max_new_tokens = 8\nseeds = [0, 1]\n"
         "[output]\nformats = [\"csv\", \"md\"]\n"
         "[sweep]\n\"draft.gamma\" = [1, 2, 4]\n" + extra;
}

// Deterministic fake stats in the engine's conventions: draft-1m accepts each token with
// probability 0.5, other drafters 0.8, over 10 rounds; tokens/s depend on prompt and seed;
// time_s is 10 ms of prefill (20 ms with a drafter) plus the decode time; drafting costs
// 2.5 ms per drafted token per 10 rounds, so every speedup stays below its bound.
class FakeBackend : public GenerationBackend {
 public:
  int generate_calls = 0;
  int kill_on_call = 0;              // > 0: SIGKILL the process on this generate call
  int interrupt_on_call = 0;         // > 0: raise SIGINT during this generate call
  int reject_gamma = 0;              // > 0: validate() rejects draft.gamma == this

  // BOS, then the bytes of the text (of a chat: each message's role and content).
  std::vector<int> tokenize(const std::string&, const Prompt& prompt) override {
    std::vector<int> ids = {1};
    const auto add = [&ids](const std::string& text) {
      for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    };
    add(prompt.text);
    for (const ChatMessage& m : prompt.messages) add(m.role + m.content);
    return ids;
  }
  void validate(const GenerateOptions& o, const OptionNames&) override {
    SPECULA_CHECK(o.draft.gamma != reject_gamma || o.draft.method == DraftMethod::kNone, "gamma ", reject_gamma, " unsupported");
  }
  std::string device_name() override { return "none"; }
  int threads(const GenerateOptions& o) override { return o.threads > 0 ? o.threads : 2; }

  nlohmann::json generate(const GenerateOptions& o) override {
    if (++generate_calls == kill_on_call) std::raise(SIGKILL);
    if (generate_calls == interrupt_on_call) std::raise(SIGINT);
    const double base_tps = 100.0 + static_cast<double>(o.prompt_ids.size() % 7) + 3.0 * static_cast<double>(o.seed);
    nlohmann::json stats = {{"prompt_tokens", o.prompt_ids.size()}, {"new_tokens", o.max_new_tokens},
                            {"prefill_tokens_per_s", 1000.0}};
    if (o.draft.method == DraftMethod::kNone) {
      stats.update({{"decode_tokens_per_s", base_tps}, {"decode_s", o.max_new_tokens / base_tps},
                    {"time_s", 0.01 + o.max_new_tokens / base_tps},
                    {"target_forwards", o.max_new_tokens}, {"drafted", 0}, {"accepted", 0},
                    {"accepted_per_depth", nlohmann::json::array()}});
    } else {
      const double alpha = o.draft.model_dir.find("draft-1m") != std::string::npos ? 0.5 : 0.8;
      const int rounds = 10;
      std::vector<double> per_depth;  // share of the rounds reaching each depth
      int accepted = 0;
      for (int d = 0; d < o.draft.gamma; ++d) {
        const int reached = static_cast<int>(rounds * std::pow(alpha, d + 1));
        per_depth.push_back(static_cast<double>(reached) / rounds);
        accepted += reached;
      }
      const double tau = static_cast<double>(accepted + rounds) / rounds;
      const double tps = base_tps * tau / (1 + 0.1 * o.draft.gamma);
      stats.update({{"decode_tokens_per_s", tps},
                    {"decode_s", o.max_new_tokens / tps},
                    {"time_s", 0.02 + o.max_new_tokens / tps},
                    {"target_forwards", rounds + 1},
                    {"steps", rounds},
                    {"drafted", o.draft.gamma * rounds},
                    {"accepted", accepted},
                    {"accepted_per_depth", per_depth},
                    {"mean_accepted_tokens", tau},
                    {"acceptance_rate", static_cast<double>(accepted) / (o.draft.gamma * rounds)},
                    {"time_breakdown", {{"draft_s", 0.0025 * o.draft.gamma}, {"verify_forward_s", 0.5}, {"sample_verify_s", 0.125},
                                        {"commit_s", 0.0625}}}});
    }
    return {{"ids", std::vector<int>(static_cast<std::size_t>(o.max_new_tokens), 7)}, {"text", "fake"}, {"stats", stats}};
  }

  // Each request's generate() object (one call each, counted) with latencies from its decode
  // tokens/s, shared among min(batch_size, requests) live sequences at a cost of sqrt(live);
  // the summary's throughput is the requests' tokens over the last finish.
  int batch_calls = 0;
  std::vector<std::vector<double>> arrivals_seen;
  nlohmann::json generate_batch(const std::vector<GenerateOptions>& requests, int batch_size,
                                const std::vector<double>& arrivals_s) override {
    ++batch_calls;
    arrivals_seen.push_back(arrivals_s);
    const double live = std::min<double>(batch_size, static_cast<double>(requests.size()));
    nlohmann::json results = nlohmann::json::array();
    double tokens = 0, end = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      nlohmann::json r = generate(requests[i]);
      const double tps = r["stats"]["decode_tokens_per_s"].get<double>() / std::sqrt(live);
      const double gap = 1 / tps, start = arrivals_s.empty() ? 0.0 : arrivals_s[i];
      const double latency = 0.01 + requests[i].max_new_tokens * gap;
      r["latency"] = {{"ttft_s", 0.01}, {"inter_token_s", {{"mean", gap}, {"p50", gap}, {"p99", gap}}}, {"latency_s", latency}};
      tokens += requests[i].max_new_tokens;
      end = std::max(end, start + latency * live / static_cast<double>(requests.size()) * static_cast<double>(i + 1));
      results.push_back(std::move(r));
    }
    const nlohmann::json gap = {{"mean", 0.01}, {"p50", 0.01}, {"p90", 0.01}, {"p99", 0.01}};
    nlohmann::json summary = {{"requests", requests.size()}, {"new_tokens", tokens}, {"time_s", end},
                              {"throughput_tokens_per_s", tokens / end}, {"latency_s", gap}, {"ttft_s", gap},
                              {"inter_token_s", gap}, {"target_forwards", 10}, {"rows_per_forward", live},
                              {"mean_occupancy", live}, {"preemptions", 0}, {"batch_size", batch_size}};
    return {{"results", results}, {"summary", summary}};
  }
};

}  // namespace specula::test
