// defines: read_prompts_file(), the one reader of prompt files (JSON lines: a string "id",
// an optional string "domain", and exactly one of "prompt" (a text), "messages" (a chat) and
// "prompt_ids" (token ids); optional "options", the per-request options of
// experiments/prompt_options.h, refused in an experiment; other fields ignored) behind
// run.prompts_file and `specula generate --prompts-file`; and select_prompts(), the prompts of an experiment —
// run.prompts_file or run.prompts inline — filtered by run.domains and cut to the first
// run.prompts_per_domain of each domain.
#pragma once

#include <string>
#include <vector>

#include "experiments/config.h"

namespace specula {

enum class DomainField { kRequired, kOptional };

// The prompts of `path` in file order. `option` names where the file came from
// ("run.prompts_file", "--prompts-file"); errors read "<option> <path>:<line>: ..." (not a
// JSON object, a missing or mistyped field, an empty text or id list, a duplicate id) or
// "<option>: ..." (cannot open, no prompts).
std::vector<Prompt> read_prompts_file(const std::string& path, const std::string& option, DomainField domain);

// A chat: a non-empty array of {"role": string, "content": string}; errors begin with `where`.
std::vector<ChatMessage> read_messages(const nlohmann::json& messages, const std::string& where);

// Errors name the prompts file and line, or the run.* key and its origin.
std::vector<Prompt> select_prompts(const RunConfig& run, const Origins& origins, const std::string& config_file);

}  // namespace specula
