// defines: GenerationBackend, the one seam between the experiment runner and the
// generation engine: tokenize a prompt, check and run one request, name the device.
//
// The stats the runner reads from each result's "stats" object (absent fields count 0):
//   new_tokens, decode_tokens_per_s (the target alone: one decode step per token);
//   time_s            prefill (of target and draft) + decode, for the end-to-end speedup;
//   steps             verification rounds of a speculative run;
//   drafted, accepted draft tokens proposed and accepted over the run;
//   accepted_per_depth[d]  share of the steps whose accepted path reached depth d + 1
//                     (d = 0 is the first drafted token);
//   mean_accepted_tokens   τ, tokens emitted per step (accepted + bonus);
//   time_breakdown {draft_s, verify_forward_s, sample_verify_s, commit_s}.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/config.h"
#include "runtime/generate_options.h"

namespace specula {

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Token ids of `prompt` for the model in `model_dir`: its text under the model's tokenizer,
  // BOS first, its messages rendered with the model's chat_template (text/chat_template.h
  // encode_chat), or its ids as given.
  virtual std::vector<int> tokenize(const std::string& model_dir, const Prompt& prompt) = 0;
  // Throws SpeculaError when `options` cannot run (an unsupported combination, a prompt
  // too long), naming the options through `names`; called for every run with its longest
  // prompt before anything runs.
  virtual void validate(const GenerateOptions& options, const OptionNames& names) = 0;
  // One generation: the object `specula generate --json` prints ({"ids", "text", "stats"}).
  virtual nlohmann::json generate(const GenerateOptions& options) = 0;
  // A batched job (run.batch_size >= 1): every request through one scheduler with at most
  // `batch_size` live sequences, request i submitted at arrivals_s[i] seconds after the
  // start (empty: all at once). Returns {"results": [one generate object per request, plus
  // "latency": {"ttft_s", "inter_token_s": {"mean", "p50", "p99"}, "latency_s"}], "summary":
  // {"requests", "new_tokens", "time_s", "throughput_tokens_per_s", "latency_s" / "ttft_s" /
  // "inter_token_s": {"mean", "p50", "p90", "p99"}, "target_forwards", "rows_per_forward",
  // "mean_occupancy", "kv_pool_blocks", "preemptions", "batch_size"}} (runtime/batch_run.h).
  virtual nlohmann::json generate_batch(const std::vector<GenerateOptions>& requests, int batch_size,
                                        const std::vector<double>& arrivals_s) = 0;
  // The accelerator the runs use, for the machine record; "none" on CPU.
  virtual std::string device_name() = 0;
  // The CPU threads `options` runs with (its threads, or the default when that is 0).
  virtual int threads(const GenerateOptions& options) = 0;
};

}  // namespace specula
