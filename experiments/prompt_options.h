// defines: apply_prompt_options(), the per-request options of a `specula generate
// --prompts-file` line: its "options" object maps config keys (configs/README.md) to JSON
// values, e.g. {"sampling.temperature": 0.7, "sampling.stop_strings": ["\n\n"],
// "run.max_new_tokens": 16, "output.logprobs": 2}, each parsed and range-checked as the config
// key is; and prompt_option_names(), which names a key set there as "options.KEY" in the
// request's validation errors.
//
// Only keys a request may set apart from the others of its batch are taken: sampling.*,
// draft.*, verify.*, run.max_new_tokens and output.logprobs*; the rest (the target, the
// backend, the KV cache, threads) are the batch's and are refused by name.
#pragma once

#include <filesystem>
#include <string_view>
#include <nlohmann/json.hpp>

#include "base/option_names.h"
#include "runtime/generate_options.h"

namespace specula {

// Applies `options` (null: nothing) to `request`; a path (draft.path) resolves against `dir`.
// Throws SpeculaError "options.KEY ..." for an object that is not one, an unknown or shared
// key (its message says to set it `shared_where`), or a value its config key refuses.
void apply_prompt_options(const nlohmann::json& options, GenerateOptions& request, const std::filesystem::path& dir,
                          std::string_view shared_where = "on the command line");

// `names`, but for the keys `options` sets, which it names "options.KEY" and counts as given
// (validation refuses one set where it does not apply, as it does a flag).
OptionNames prompt_option_names(const nlohmann::json& options, OptionNames names);

}  // namespace specula
