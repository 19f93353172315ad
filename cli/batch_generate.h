// defines: run_batch, the batch mode of `specula generate`: every prompt of a --prompts-file,
// read by experiments/prompts.h's reader, through one Scheduler at --batch-size live
// sequences; results in the file's order, then one summary.
#pragma once

#include <string>

#include "runtime/generate_options.h"
#include "runtime/model_store.h"

namespace specula::cli {

// Runs every prompt of `prompts_file` with `base`'s other settings, batch_size sequences live
// at once. With `json`: one line per prompt (generate's --json object, its "id" and its
// "latency"), then one summary object (no "ids"); otherwise each prompt's text under a
// "--- id ---" line and the summary on stderr. A prompt that cannot run is refused (naming its
// line) before any runs.
int run_batch(ModelStore& models, const GenerateOptions& base, const std::string& prompts_file, int batch_size, bool json);

}  // namespace specula::cli
