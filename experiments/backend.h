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
  // BOS first, or its messages rendered with the model's chat_template (engine/chat_template.h
  // encode_chat).
  virtual std::vector<int> tokenize(const std::string& model_dir, const Prompt& prompt) = 0;
  // Throws SpeculaError when `options` cannot run (an unsupported combination, a prompt
  // too long), naming the options through `names`; called for every run with its longest
  // prompt before anything runs.
  virtual void validate(const GenerateOptions& options, const OptionNames& names) = 0;
  // One generation: the object `specula generate --json` prints ({"ids", "text", "stats"}).
  virtual nlohmann::json generate(const GenerateOptions& options) = 0;
  // The accelerator the runs use, for the machine record; "none" on CPU.
  virtual std::string device_name() = 0;
  // The CPU threads `options` runs with (its threads, or the default when that is 0).
  virtual int threads(const GenerateOptions& options) = 0;
};

}  // namespace specula
