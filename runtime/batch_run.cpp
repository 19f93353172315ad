#include "runtime/batch_run.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/error.h"
#include "runtime/batch_report.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"

namespace specula {

BatchRun run_requests(ModelStore& models, std::span<const GenerateOptions> requests, int batch_size,
                      std::span<const double> arrivals_s) {
  SPECULA_CHECK(batch_size >= 1, "batch size must be >= 1, got ", batch_size);
  SPECULA_CHECK(!requests.empty(), "a batch needs at least one request");
  SPECULA_CHECK(arrivals_s.empty() || arrivals_s.size() == requests.size(), "arrival times: ", arrivals_s.size(),
                " for ", requests.size(), " requests");
  SPECULA_CHECK(std::is_sorted(arrivals_s.begin(), arrivals_s.end()) &&
                    (arrivals_s.empty() || arrivals_s.front() >= 0),
                "arrival times must be >= 0 and non-decreasing");
  SchedulerLimits limits;
  limits.max_sequences = batch_size;
  int largest = 0;  // KV blocks of the largest request with one sample live
  for (std::size_t i = 0; i < requests.size(); ++i) {
    try {
      validate_generate_options(models, requests[i], cli_option_names());
    } catch (const SpeculaError& e) {
      throw SpeculaError(detail::concat("request ", i, ": ", e.what()));
    }
    largest = std::max(largest, request_kv_blocks(requests[i], 1));
    limits.max_rows = std::max(limits.max_rows, 1 + max_tree_nodes(requests[i].draft));
  }
  // The pool set, or one for batch_size sequences of the largest request.
  limits.kv_blocks = kv_pool_blocks_or(requests.front(), largest * batch_size);
  omp_set_num_threads(request_threads(requests.front()));
  Scheduler scheduler(models, requests.front(), limits);
  std::vector<int> index;
  const auto submit = [&](std::size_t i) {
    try {
      index.push_back(scheduler.submit(requests[i], i, {}, arrivals_s.empty() ? -1.0 : arrivals_s[i]));
    } catch (const SpeculaError& e) {
      throw SpeculaError(detail::concat("request ", i, ": ", e.what()));
    }
  };
  std::size_t next = 0;
  while (next < requests.size() || !scheduler.idle()) {
    while (next < requests.size() && (arrivals_s.empty() || arrivals_s[next] <= scheduler.now())) submit(next++);
    if (scheduler.idle() && next < requests.size()) {  // nothing to run until the next arrival
      std::this_thread::sleep_for(std::chrono::duration<double>(arrivals_s[next] - scheduler.now()));
      continue;
    }
    scheduler.step();
  }
  BatchRun run;
  run.summary = batch_summary(scheduler, index, scheduler.now());
  run.summary["batch_size"] = batch_size;
  const Model& target = models.model(requests.front().model_dir);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RequestOutcome& out = scheduler.outcome(index[i]);
    nlohmann::json result = request_json(target, requests[i], out, scheduler.kv_stats(), scheduler.draft_blocks_in_use());
    result["latency"] = request_latency(out);
    run.results.push_back(std::move(result));
  }
  return run;
}

}  // namespace specula
