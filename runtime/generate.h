// defines: generate(), one generation request end to end (prefill, decoding loop, stats),
// returning the JSON object `specula generate --json` prints and the experiment runner
// records: {"ids", "text", "samples"?, "stats"}.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/generate_options.h"
#include "runtime/model_store.h"
#include "sampling/token_logprob.h"

namespace specula {

// Called with each new token as soon as it is final: its sample index, its id, and its
// log-probabilities where the request asks for them (options.logprobs), else nullptr.
using TokenSink = std::function<void(int sample, int token, const TokenLogprob* logprob)>;

nlohmann::json generate(ModelStore& models, const GenerateOptions& options, const TokenSink& sink = {});

// Throws SpeculaError naming the option (through `names`) for anything the request cannot
// run with: validate_options' checks, then those that need the models: a prompt empty or too
// long for the target, ids outside its vocabulary, a draft model whose vocabulary, special
// ids or tokenizer differ from the target's.
void validate_generate_options(ModelStore& models, const GenerateOptions& options, const OptionNames& names);

// The CPU threads a request runs on: options.threads, or for 0 the process's default
// (OMP_NUM_THREADS, else every core) as it was before any request set a count.
int request_threads(const GenerateOptions& options);

// The accelerator this process could run requests on, for machine records: "cuda" or "none".
std::string accelerator_name();

}  // namespace specula
