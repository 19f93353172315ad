// defines: run_requests(), a set of generation requests through one Scheduler with at most
// `batch_size` live sequences, each submitted at its arrival time — the one batched path of
// `specula generate --prompts-file` and of the experiment runner's batched jobs (run.batch_size).
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "runtime/generate_options.h"
#include "runtime/model_store.h"

namespace specula {

struct BatchRun {
  // [requests]: each request's generate --json object ({"ids", "text", "samples"?, "stats"})
  // plus "latency" (runtime/batch_report.h request_latency), in the order given.
  std::vector<nlohmann::json> results;
  // batch_summary of them all, plus "batch_size".
  nlohmann::json summary;
};

// Validates every request (validate_generate_options; a refusal names the request's index as
// "request i: ..."), sizes the KV pool as `requests.front()` sets it (kv_pool_blocks) or else
// for `batch_size` sequences of the largest request, and runs them on its target.
// `arrivals_s` is empty (every request at once) or holds one time per request, non-decreasing,
// in seconds after the start: a request is submitted when the clock reaches it (between steps;
// its latencies count from its arrival), and the scheduler waits when nothing is live and the
// next arrival is ahead.
// Request i's sample streams are keyed by i (Scheduler::submit).
BatchRun run_requests(ModelStore& models, std::span<const GenerateOptions> requests, int batch_size,
                      std::span<const double> arrivals_s = {});

}  // namespace specula
