#include "cli/batch_generate.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "runtime/batch_report.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"

namespace specula::cli {

std::vector<BatchPrompt> read_batch_prompts(const std::string& path, const Tokenizer& tokenizer) {
  std::ifstream in(path);
  SPECULA_CHECK(in, "--prompts-file: cannot open '", path, "'");
  std::vector<BatchPrompt> prompts;
  std::set<std::string> ids;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    BatchPrompt p;
    p.where = "--prompts-file " + path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    SPECULA_CHECK(j.is_object(), p.where, ": not a JSON object");
    SPECULA_CHECK(j.contains("id") && j["id"].is_string(), p.where, ": missing string field 'id'");
    p.id = j["id"].get<std::string>();
    SPECULA_CHECK(ids.insert(p.id).second, p.where, ": prompt id '", p.id, "' appears twice");
    SPECULA_CHECK(j.contains("prompt") != j.contains("prompt_ids"), p.where,
                  ": needs exactly one of 'prompt' (text) and 'prompt_ids' (token ids)");
    if (j.contains("prompt")) {
      SPECULA_CHECK(j["prompt"].is_string() && !j["prompt"].get<std::string>().empty(), p.where,
                    ": 'prompt' must be a non-empty string");
      p.ids = tokenizer.encode(j["prompt"].get<std::string>(), true);
    } else {
      const nlohmann::json& list = j["prompt_ids"];
      SPECULA_CHECK(list.is_array() && !list.empty(), p.where, ": 'prompt_ids' must be a non-empty list of integers");
      for (const nlohmann::json& id : list) {
        SPECULA_CHECK(id.is_number_integer(), p.where, ": 'prompt_ids' holds ", id.dump(), ", not an integer");
        p.ids.push_back(id.get<int>());
      }
    }
    prompts.push_back(std::move(p));
  }
  SPECULA_CHECK(!prompts.empty(), "--prompts-file: '", path, "' holds no prompts");
  return prompts;
}

int run_batch(ModelStore& models, const GenerateOptions& base, const std::vector<BatchPrompt>& prompts, int batch_size,
              bool json) {
  SPECULA_CHECK(batch_size >= 1, "--batch-size must be >= 1, got ", batch_size);
  std::vector<GenerateOptions> requests;
  SchedulerLimits limits;
  limits.max_sequences = batch_size;
  int largest = 0;  // KV blocks of the largest request with one sample live
  for (const BatchPrompt& p : prompts) {
    GenerateOptions o = base;
    o.prompt_ids = p.ids;
    try {
      validate_generate_options(models, o, cli_option_names());
    } catch (const SpeculaError& e) {
      throw SpeculaError(p.where + " (" + p.id + "): " + e.what());
    }
    largest = std::max(largest, request_kv_blocks(o, 1));
    requests.push_back(std::move(o));
  }
  // A pool for batch_size sequences of the largest request.
  limits.kv_blocks = largest * batch_size;
  limits.max_rows = std::max(limits.max_rows, 1 + max_tree_nodes(base.draft));
  omp_set_num_threads(request_threads(base));
  Scheduler scheduler(models, requests.front(), limits);
  std::vector<int> index;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    try {
      index.push_back(scheduler.submit(requests[i], i));
    } catch (const SpeculaError& e) {
      throw SpeculaError(prompts[i].where + " (" + prompts[i].id + "): " + e.what());
    }
  }
  scheduler.run();
  const double wall_s = scheduler.now();

  const Model& target = models.model(base.model_dir);
  nlohmann::json summary = batch_summary(scheduler, index, wall_s);
  summary["batch_size"] = batch_size;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const RequestOutcome& out = scheduler.outcome(index[i]);
    if (json) {
      nlohmann::json result = request_json(target, requests[i], out, scheduler.kv_stats(), scheduler.draft_blocks_in_use());
      result["id"] = prompts[i].id;
      result["latency"] = request_latency(out);
      std::cout << result.dump() << "\n";
    } else {
      std::cout << (i > 0 ? "\n" : "") << "--- " << prompts[i].id << " ---\n";
      for (std::size_t s = 0; s < out.samples.size(); ++s) {
        if (out.samples.size() > 1) std::cout << "--- " << prompts[i].id << " sample " << s + 1 << " ---\n";
        std::cout << target.tokenizer().decode(out.samples[s]) << "\n";
      }
    }
  }
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
