// defines: the batch mode of `specula generate`: prompt_token_ids (a Prompt's token ids for a
// model: its text with BOS, its chat through the model's chat_template, or its ids), and
// run_batch (every prompt of a --prompts-file, read by experiments/prompts.h's reader, through
// one Scheduler at --batch-size live sequences; results in the file's order, then one summary).
#pragma once

#include <string>
#include <vector>

#include "experiments/config.h"
#include "runtime/generate_options.h"
#include "runtime/model_store.h"

namespace specula::cli {

// The token ids of `prompt` for the model in `model_dir`: its text under the model's
// tokenizer, BOS first; its messages rendered with the model's chat_template as a generation
// prompt (as --chat renders its message); or its ids as given.
std::vector<int> prompt_token_ids(ModelStore& models, const std::string& model_dir, const Prompt& prompt);

// Runs every prompt of `prompts_file` with `base`'s other settings, batch_size sequences live
// at once. With `json`: one line per prompt (generate's --json object, its "id" and its
// "latency"), then one summary object (no "ids"); otherwise each prompt's text under a
// "--- id ---" line and the summary on stderr. A prompt that cannot run is refused (naming its
// line) before any runs.
int run_batch(ModelStore& models, const GenerateOptions& base, const std::string& prompts_file, int batch_size, bool json);

}  // namespace specula::cli
