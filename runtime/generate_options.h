// defines: GenerateOptions, every setting of one generation request — what
// `specula generate` flags and a resolved experiment-config point both map to — the CLI's
// names of its options (cli_option_names) and validate_options, the checks that need no model,
// shared by the CLI and the experiment runner (errors name the flag or the config key).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "base/option_names.h"
#include "draft/draft_options.h"
#include "engine/backend.h"
#include "sampling/logit_controls.h"
#include "sampling/sampling_options.h"
#include "sampling/token_logprob.h"
#include "verify/verify_rule.h"

namespace specula {

// How a speculative request's chain length is chosen each step: fixed (draft.gamma, or the
// drafter's own adaptive chain), threshold (runtime/draft_length_policy.h: a confidence stop
// and a batch-size cut-off), or load (runtime/draft_length.h: 0..gamma, whichever the
// measured costs of this step's batch and the measured acceptance predict fastest; 0 is a
// plain step).
enum class GammaPolicy { kFixed, kThreshold, kLoad };

inline std::span<const EnumName<GammaPolicy>> enum_names(GammaPolicy) {
  static constexpr EnumName<GammaPolicy> kNames[] = {
      {GammaPolicy::kFixed, "fixed"}, {GammaPolicy::kThreshold, "threshold"}, {GammaPolicy::kLoad, "load"}};
  return kNames;
}

// The threshold policy's two rules: a draft model's chain ends after the token at which the
// product of its draft probabilities falls below stop_below (draft.stop_below); no sequence
// drafts in a step of more than max_batch sequences (draft.max_batch, 0: no cut-off).
struct LengthThreshold {
  double stop_below = 0;
  int max_batch = 0;
};

struct GenerateOptions {
  std::string model_dir;        // target model folder
  std::optional<MatrixFormat> weights;  // the format the target's matrices are read in; nullopt = as stored
  std::vector<int> prompt_ids;  // used as given (BOS included by the caller when wanted)
  int max_new_tokens = 64;
  uint64_t seed = 0;
  int num_samples = 1;
  int kv_block_size = 16;
  // run.kv_pool_blocks: the target's KV pool in blocks (each draft model's pool follows it);
  // 0 = sized for the run (every sample of a lone request, or a batch's sequences at the
  // largest request's length). A smaller pool preempts sequences when it runs short.
  int kv_pool_blocks = 0;
  // run.kv_dtype: the KV pages' element type, target and draft caches alike; nullopt: the
  // backend's own (cpu f32, cuda bf16). Host pages take any KvDType, device pages the backend's.
  std::optional<KvDType> kv_dtype;
  int threads = 0;              // 0 = all cores
  BackendKind backend = BackendKind::kCpu;
  SamplingOptions sampling;
  LogitControls controls;       // sampling.repetition_penalty, ..., min_new_tokens: edits before the sampler
  // sampling.stop_strings: a sample ends once its text holds one of them, its text cut before
  // it (text/stop_strings.h).
  std::vector<std::string> stop_strings;
  DraftOptions draft;
  GammaPolicy gamma_policy = GammaPolicy::kFixed;
  LengthThreshold length_threshold;  // with gamma_policy threshold
  VerifyRule verify_rule = VerifyRule::kToken;  // verify.rule: how sampled drafts are verified (greedy: one rule)
  // output.logprobs: every emitted token's log-probability and this many alternatives (nullopt:
  // none), from output.logprobs_source's distribution (sampling/token_logprob.h).
  std::optional<int> logprobs;
  LogprobSource logprobs_source = LogprobSource::kRaw;
};

// Upper bounds of a request's sizes (validate_options names the option that exceeds one);
// the KV pool a request needs is checked against the memory available in
// validate_generate_options.
inline constexpr int kMaxThreads = 1024;      // run.threads: OpenMP teams beyond this only thrash
inline constexpr int kMaxGamma = 256;         // draft.gamma, and the depth of a draft.tree
inline constexpr int kMaxTreeNodes = 4096;    // nodes of one draft.tree, and draft.budget
inline constexpr int kMaxSequoiaNodes = 128;  // draft.budget with draft.sequoia (its DP is cubic in it)
inline constexpr int kMaxSequoiaRanks = 16;   // sibling ranks of one draft.sequoia row
inline constexpr int kMaxSequoiaDepths = 64;  // rows of draft.sequoia
inline constexpr int kMaxBeamWidth = 1024;    // sampling.beam_width
inline constexpr int kMaxNumSamples = 1 << 20;  // run.num_samples
inline constexpr int kMaxKvBlockSize = 4096;  // run.kv_block_size (token slots per block)
inline constexpr int kMaxNgram = 256;         // draft.ngram_max
inline constexpr int kMaxStopStrings = 16;     // sampling.stop_strings: strings per request
inline constexpr int kMaxStopBytes = 1024;     // and bytes of each
inline constexpr float kMinTemperature = 1e-6f;  // sampling.temperature when not 0 (logits / T stay finite)

// Nodes of the largest tree one proposal of `draft` can hold (the chain's gamma, a static
// tree's nodes, the dynamic budget, the adaptive limit); saturates at INT_MAX.
int draft_tree_nodes(const DraftOptions& draft);
// Nodes of a static tree of these branching factors (level by level), saturating at INT_MAX.
int static_tree_nodes(std::span<const int> branching);

// The layout of the caches `backend` runs a request of `options` with: Backend::kv_layout in
// options.kv_dtype when given (validate_options refuses a dtype the backend's pages cannot hold).
KvLayout request_kv_layout(const Backend& backend, const GenerateOptions& options);

// Option keys as `specula generate` spells them: "draft.gamma" -> "--gamma", ...
OptionNames cli_option_names();

// Every check of `options` that needs no model: ranges of each field and the combinations no
// request can run with (a static and a dynamic tree at once, tree or adaptive settings for a
// drafter without trees, beam search with an adaptive chain, the load policy without a chain
// or with beam search, a verification rule on trees it does not take, a draft model without
// its folder, a backend this build cannot run),
// sizes above the bounds above, and options given (names.given) where they do not apply.
// Throws SpeculaError naming the options through `names`.
void validate_options(const GenerateOptions& options, const OptionNames& names);

}  // namespace specula
