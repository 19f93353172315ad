// defines: GenerateOptions, every setting of one generation request — what
// `specula generate` flags and a resolved experiment-config point both map to — the CLI's
// names of its options (cli_option_names) and validate_options, the checks that need no model,
// shared by the CLI and the experiment runner (errors name the flag or the config key).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "base/option_names.h"
#include "draft/draft_options.h"
#include "engine/backend.h"
#include "sampling/sampling_options.h"

namespace specula {

// How a speculative request's chain length is chosen each step: fixed (draft.gamma, or the
// drafter's own adaptive chain), or load (runtime/draft_length.h: 0..gamma, whichever the
// measured costs of this step's batch and the measured acceptance predict fastest; 0 is a
// plain step).
enum class GammaPolicy { kFixed, kLoad };

inline std::span<const EnumName<GammaPolicy>> enum_names(GammaPolicy) {
  static constexpr EnumName<GammaPolicy> kNames[] = {{GammaPolicy::kFixed, "fixed"}, {GammaPolicy::kLoad, "load"}};
  return kNames;
}

struct GenerateOptions {
  std::string model_dir;        // target model folder
  std::vector<int> prompt_ids;  // used as given (BOS included by the caller when wanted)
  int max_new_tokens = 64;
  uint64_t seed = 0;
  int num_samples = 1;
  int kv_block_size = 16;
  int threads = 0;              // 0 = all cores
  BackendKind backend = BackendKind::kCpu;
  SamplingOptions sampling;
  DraftOptions draft;
  GammaPolicy gamma_policy = GammaPolicy::kFixed;
};

// Option keys as `specula generate` spells them: "draft.gamma" -> "--gamma", ...
OptionNames cli_option_names();

// Every check of `options` that needs no model: ranges of each field and the combinations no
// request can run with (a static and a dynamic tree at once, tree or adaptive settings for a
// drafter without trees, beam search with an adaptive chain, the load policy without a chain
// or with beam search, a draft model without its folder, a
// backend this build cannot run). Throws SpeculaError naming the options through `names`.
void validate_options(const GenerateOptions& options, const OptionNames& names);

}  // namespace specula
