// defines: the latency and throughput figures of requests run through a Scheduler: per
// request (time to first token, inter-token latency mean / p50 / p99, end-to-end latency)
// and per batch (output throughput, latency percentiles over the requests, mean occupancy,
// rows per target forward) — what `specula generate --prompts-file` prints.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "runtime/scheduler.h"

namespace specula {

// The p-th percentile (0..100) of `values` by linear interpolation between order
// statistics (numpy's default); 0 for no values.
double percentile(std::vector<double> values, double p);

// {"ttft_s", "inter_token_s": {"mean", "p50", "p99"}, "latency_s"} of one finished request
// (times from its submission; inter-token gaps between sample 0's tokens).
nlohmann::json request_latency(const RequestOutcome& outcome);

// The summary of `requests` (indices into `scheduler`, all finished) that ran in `wall_s`:
// {"requests", "new_tokens", "time_s", "throughput_tokens_per_s", "latency_s" / "ttft_s" /
// "inter_token_s": {"mean", "p50", "p90", "p99"}, "target_forwards", "rows_per_forward",
// "mean_occupancy", "kv_pool_blocks" (the target pool), "preemptions"}.
nlohmann::json batch_summary(const Scheduler& scheduler, std::span<const int> requests, double wall_s);

}  // namespace specula
