// defines: what the decoding paths behind generate() share: beam search's loops (decode_beam,
// decode_speculative_beam; plain and speculative decoding are steps of the scheduler,
// runtime/scheduler.h) and DecodeRun, what they return; what the speculative paths share
// (draft distribution, stats); emit_token, prefill, the draft model of a request and its
// compatibility check, and KV pool sizing.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "draft/model_drafter.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "runtime/generate.h"
#include "runtime/scheduler_limits.h"
#include "runtime/speculative_sequence.h"

namespace specula {

struct DecodeRun {
  std::vector<std::vector<int>> samples;  // new tokens of each sample (beam: the n-best)
  double prefill_s = 0;
  double decode_s = 0;
  int target_forwards = 0;
  int target_forwards_rows = 0;  // rows over all target forwards (a batched step counts each sequence's rows)
  int target_sequences = 0;      // sequences with rows, summed over the target forwards (beam: the live beams)
  KvStats kv;                 // of the target cache, after every sequence was freed
  nlohmann::json extra;       // strategy-specific stats merged into "stats"
};

// Appends `token` to `ids` unless the sample is complete, and hands it to `sink` with
// `logprob` (its log-probabilities, or nullptr); true when the sample is complete after (any
// of `eos_ids` emitted or max_new_tokens reached).
bool emit_token(std::vector<int>& ids, int token, const GenerateOptions& options, std::span<const int> eos_ids,
                int sample, const TokenSink& sink, const TokenLogprob* logprob = nullptr);

// Beam search over one request: every step feeds its live beams in one batched forward.
DecodeRun decode_beam(const Backend& target, const GenerateOptions& options, const TokenSink& sink);
// Beam search with a drafter (runtime/speculative_beam.h): the output of decode_beam, bitwise.
DecodeRun decode_speculative_beam(ModelStore& models, const Backend& target, const GenerateOptions& options,
                                  const TokenSink& sink);

// The transform drafts rank or draw by (deterministic for greedy and beam); tree_shape,
// max_tree_nodes and the KV pool sizes are in runtime/scheduler_limits.h.
DistributionFn draft_distribution(const SamplingOptions& sampling, const DraftOptions& d);

// The speculative fields of "stats" (docs/architecture.md): `emitted` is what one round
// yields summed over rounds (tokens; beam search: beam steps), for τ.
nlohmann::json speculative_stats_json(const DraftOptions& d, const SpeculativeStats& stats, long emitted,
                                      long draft_forwards);

// A new sequence of `context.cache` holding `tokens` at positions 0, 1, ... (one causal
// forward; none when tokens is empty). Returns it; the next-token logits after the last
// token go to last_logits (out, resized to [vocab]).
KvCache::SeqId prefill(const ForwardContext& context, std::span<const int> tokens, std::vector<float>& last_logits);

// Throws SpeculaError (naming draft.path through `names`) unless `draft` shares the target's
// vocabulary, special ids and pieces.
void check_draft_compatible(const Model& target, const Model& draft, const OptionNames& names);

// The draft model of a request (method = model) on the request's backend `kind` (beside its
// target), its matrices read in DraftOptions::weights.
const Backend& draft_model(ModelStore& models, const DraftOptions& draft, BackendKind kind);

// A lone request (generate()) decodes at most this many of its samples side by side, the
// next forked as others finish (the results do not depend on it: rows are batch-invariant
// and each sample has its own Philox stream); its KV pool is sized for that many.
inline constexpr int kSampleWave = 64;

}  // namespace specula
