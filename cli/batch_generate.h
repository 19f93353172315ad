// defines: the batch mode of `specula generate`: read_batch_prompts (the --prompts-file JSON
// lines: a string "id" and a "prompt" text or "prompt_ids" list each) and run_batch (every
// prompt through one Scheduler at --batch-size live sequences; results in the file's order,
// then one summary).
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "runtime/generate_options.h"
#include "runtime/model_store.h"

namespace specula::cli {

struct BatchPrompt {
  std::string id;
  std::vector<int> ids;  // token ids (a "prompt" text is encoded with BOS)
  std::string where;     // FILE:LINE, for errors
};

// Throws SpeculaError naming --prompts-file, the file and line for anything but a JSON
// object with a string "id" (unique) and exactly one of "prompt" (a non-empty string) and
// "prompt_ids" (a non-empty list of integers); and for a file without prompts.
std::vector<BatchPrompt> read_batch_prompts(const std::string& path, const Tokenizer& tokenizer);

// Runs every prompt with `base`'s other settings, batch_size sequences live at once. With
// `json`: one line per prompt (generate's --json object, its "id" and its "latency"), then one
// summary object (no "ids"); otherwise each prompt's text under a "--- id ---" line and the
// summary on stderr. A prompt that cannot run is refused (naming its line) before any runs.
int run_batch(ModelStore& models, const GenerateOptions& base, const std::vector<BatchPrompt>& prompts, int batch_size,
              bool json);

}  // namespace specula::cli
