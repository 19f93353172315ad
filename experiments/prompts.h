// defines: select_prompts(), the prompts of an experiment — run.prompts_file (JSON lines
// with fields id, domain and prompt, or messages for a chat; others ignored) or run.prompts inline — filtered by
// run.domains and cut to the first run.prompts_per_domain of each domain.
#pragma once

#include <string>
#include <vector>

#include "experiments/config.h"

namespace specula {

// Errors name the prompts file and line, or the run.* key and its origin.
std::vector<Prompt> select_prompts(const RunConfig& run, const Origins& origins, const std::string& config_file);

}  // namespace specula
