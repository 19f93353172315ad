// defines: ExperimentConfig, an experiment TOML file parsed and validated into typed
// structs (sections target, draft, sampling, run, output and the sweep grid), and
// load_config(). Every check happens here, before anything runs; errors name the key
// and the file:line:column.
//
// Relative paths in a config (target.path, draft.path, run.prompts_file,
// output.directory) are resolved against the folder of the config file, so a config
// means the same thing from any working directory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "runtime/generate_options.h"
#include "sampling/logit_controls.h"

namespace specula {

// A prompt of an experiment or of `specula generate --prompts-file`: a text (encoded with
// BOS), a chat (messages, rendered with the target's chat_template as a generation prompt) or
// token ids used as given; exactly one of them is non-empty.
struct Prompt {
  std::string id;
  std::string domain;
  std::string text;
  std::vector<ChatMessage> messages;
  std::vector<int> ids;
  nlohmann::json options;  // `specula generate --prompts-file` only: the line's per-request "options" (null: none)
};

// The settings that define one run of the sweep (everything but prompt and seed).
struct PointConfig {
  std::string target;         // target.path, absolute
  std::optional<MatrixFormat> target_weights;  // target.weights; nullopt = as stored
  std::string draft_name;     // draft.name, display only; "" = derived (see plan.h)
  DraftOptions draft;         // draft.method, path, gamma, tree, budget, adaptive, ngram_*
  std::string sampling_name;  // sampling.name, display only; "" = derived
  SamplingOptions sampling;
  LogitControls controls;     // sampling.repetition_penalty, ..., sampling.min_new_tokens
  std::vector<std::string> stop_strings;  // sampling.stop_strings
  int max_new_tokens = 64;    // run.max_new_tokens
  int kv_block_size = 16;     // run.kv_block_size
  int kv_pool_blocks = 0;     // run.kv_pool_blocks: 0 = sized for the run
  std::optional<KvDType> kv_dtype;  // run.kv_dtype; nullopt: the backend's own
  int threads = 0;            // run.threads, 0 = all cores
  BackendKind backend = BackendKind::kCpu;  // run.backend
  GammaPolicy gamma_policy = GammaPolicy::kFixed;  // draft.gamma_policy
  LengthThreshold length_threshold;                // draft.stop_below, draft.max_batch
  VerifyRule verify_rule = VerifyRule::kToken;     // verify.rule
  int batch_size = 0;         // run.batch_size: 0 = one request per job; N >= 1 = every prompt in
                              //   one job through the scheduler, N sequences live at once
  double request_rate = 0;    // run.request_rate: Poisson arrivals per second of a batched job, 0 = all at once
  std::optional<int> logprobs;  // output.logprobs: each emitted token's log-probability and this many alternatives
  LogprobSource logprobs_source = LogprobSource::kRaw;  // output.logprobs_source
};
inline constexpr int kMaxBatchSize = 4096;          // run.batch_size
inline constexpr double kMaxRequestRate = 1e6;      // run.request_rate (requests per second)

// Run settings shared by every point of the sweep (not sweepable).
struct RunConfig {
  std::string prompts_file;             // run.prompts_file, absolute; "" when run.prompts is inline
  std::vector<Prompt> inline_prompts;   // run.prompts
  std::vector<std::string> domains;     // run.domains, empty = all
  int prompts_per_domain = 0;           // first N of each domain, 0 = all
  std::vector<uint64_t> seeds = {0};
  int repetitions = 3;                  // timing repeats of each (point, prompt, seed); the median counts
};
inline constexpr int kMaxRepetitions = 1000;  // run.repetitions

struct OutputConfig {
  std::string directory = "results";             // absolute after loading
  std::vector<std::string> formats = {"csv", "md", "png"};
};

struct Settings {
  std::string title;
  PointConfig point;
  RunConfig run;
  OutputConfig output;
};

// Dotted key -> "file:line:column" of the value that set it.
using Origins = std::map<std::string, std::string>;

// One change to the settings, parsed and checked from a config value.
using Assignment = std::function<void(Settings&)>;

// One value of a sweep axis (or one sweep.exclude entry): a display label and the
// settings it sets.
struct SweepValue {
  std::string label;
  std::string origin;                    // file:line:column
  std::vector<std::string> keys;         // dotted keys it sets
  std::vector<Assignment> assignments;   // one per key
};

struct SweepAxis {
  std::string key;  // dotted field ("draft.gamma") or section ("draft") for tables of overrides
  std::vector<SweepValue> values;
  std::string written;  // the values as TOML, paths absolute (for the resolved config)
};

struct Sweep {
  std::vector<SweepAxis> axes;          // in the order the file writes them
  std::vector<SweepValue> exclusions;   // sweep.exclude: grid points that match one are dropped
  std::string written;                  // the [sweep] table, paths absolute
};

// One point of the sweep grid (the product of the axes, first axis slowest).
struct GridPoint {
  PointConfig point;
  std::vector<std::pair<std::string, std::string>> coords;  // (axis key, value label)
};

struct ExperimentConfig {
  std::string file;                 // the config file as given
  Settings base;                    // every default filled in
  Origins origins;                  // keys the file sets
  Sweep sweep;
  std::vector<GridPoint> grid;      // one point when there is no sweep
  std::vector<Prompt> prompts;      // after run.domains and run.prompts_per_domain
  std::string resolved_toml;        // the config with every default filled, paths absolute
};

// The double that prints as `v`'s shortest decimal (0.7f -> 0.7, not 0.699999988), for
// settings written to TOML and JSON.
double as_written(float v);

// The request settings of `p` (GenerateOptions without prompt and seed).
GenerateOptions request_options(const PointConfig& p);
// The point whose request_options() are `o`'s settings (prompt, seed and samples aside).
PointConfig point_config(const GenerateOptions& o);

// `p` with its draft settings reset: the target-alone run (draft.method = "none").
void clear_draft(PointConfig& p);

// Every setting that defines a run (display names excluded), as a JSON object with sorted
// keys: equal runs have equal settings.
nlohmann::json canonical_settings(const PointConfig& p);

// Parses and validates `path`; throws SpeculaError naming key and file:line:column.
ExperimentConfig load_config(const std::string& path);

}  // namespace specula
