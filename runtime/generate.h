// defines: generate(), one generation request end to end (prefill, decoding loop, stats),
// returning the JSON object `specula generate --json` prints and the experiment runner
// records: {"ids", "text", "samples"?, "stats"}.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/generate_options.h"
#include "runtime/model_store.h"

namespace specula {

// Called with each new token as soon as it is final (sample index, token id).
using TokenSink = std::function<void(int sample, int token)>;

nlohmann::json generate(ModelStore& models, const GenerateOptions& options, const TokenSink& sink = {});

}  // namespace specula
