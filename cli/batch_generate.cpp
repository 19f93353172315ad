#include "cli/batch_generate.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "experiments/engine_backend.h"
#include "experiments/prompt_options.h"
#include "experiments/prompts.h"
#include "runtime/batch_run.h"
#include "runtime/generate.h"

namespace specula::cli {
namespace {

// "--prompts-file FILE:LINE" of the i-th prompt (blank lines skipped, as the reader skips them).
std::vector<std::string> prompt_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> where;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number)
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      where.push_back("--prompts-file " + path + ":" + std::to_string(number));
  return where;
}

}  // namespace

int run_batch(ModelStore& models, const GenerateOptions& base, const std::string& prompts_file, int batch_size, bool json) {
  SPECULA_CHECK(batch_size >= 1, "--batch-size must be >= 1, got ", batch_size);
  const std::vector<Prompt> prompts = read_prompts_file(prompts_file, "--prompts-file", DomainField::kOptional);
  const std::vector<std::string> where = prompt_lines(prompts_file);
  std::vector<GenerateOptions> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions o = base;
    try {
      o.prompt_ids = prompt_token_ids(models, base.model_dir, prompts[i]);
      apply_prompt_options(prompts[i].options, o, std::filesystem::absolute(prompts_file).parent_path());
      const OptionNames names = prompt_option_names(prompts[i].options, cli_option_names());
      SPECULA_CHECK(json || !o.logprobs, names.at("output.logprobs"), " needs --json (the text output has no place for them)");
      validate_generate_options(models, o, names);
    } catch (const SpeculaError& e) {
      throw SpeculaError(where[i] + " (" + prompts[i].id + "): " + e.what());
    }
    requests.push_back(std::move(o));
  }
  const BatchRun run = run_requests(models, requests, batch_size);

  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (json) {
      nlohmann::json result = run.results[i];
      result["id"] = prompts[i].id;
      std::cout << result.dump() << "\n";
      continue;
    }
    std::cout << (i > 0 ? "\n" : "") << "--- " << prompts[i].id << " ---\n";
    const nlohmann::json& r = run.results[i];
    if (!r.contains("samples")) {
      std::cout << r["text"].get<std::string>() << "\n";
      continue;
    }
    for (std::size_t s = 0; s < r["sample_texts"].size(); ++s) {
      std::cout << "--- " << prompts[i].id << " sample " << s + 1 << " ---\n";
      std::cout << r["sample_texts"][s].get<std::string>() << "\n";
    }
  }
  const nlohmann::json& summary = run.summary;
  if (json) {
    std::cout << summary.dump() << std::endl;
  } else {
    std::cout.flush();
    std::fprintf(stderr, "%ld prompts · %ld tokens · %.1f tok/s · latency p50 %.3f s p99 %.3f s · batch %d · %.1f rows/forward\n",
                 summary["requests"].get<long>(), summary["new_tokens"].get<long>(),
                 summary["throughput_tokens_per_s"].get<double>(), summary["latency_s"]["p50"].get<double>(),
                 summary["latency_s"]["p99"].get<double>(), batch_size, summary["rows_per_forward"].get<double>());
  }
  return 0;
}

}  // namespace specula::cli
