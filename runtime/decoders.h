// defines: the decoding loops behind generate() — plain (one target forward per token,
// any token sampler), speculative (a drafter proposes, the target verifies a tree per
// forward), beam search, plain and speculative — DecodeRun, what each returns for generate()
// to report, and what the speculative loops share (tree shape, draft distribution, stats).
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "draft/model_drafter.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "runtime/generate.h"
#include "runtime/speculative_sequence.h"

namespace specula {

struct DecodeRun {
  std::vector<std::vector<int>> samples;  // new tokens of each sample (beam: the n-best)
  double prefill_s = 0;
  double decode_s = 0;
  int target_forwards = 0;
  int target_forwards_rows = 0;  // rows over all target forwards (a batched step counts each sequence's rows)
  KvStats kv;                 // of the target cache, after every sequence was freed
  nlohmann::json extra;       // strategy-specific stats merged into "stats"
};

// Appends `token` to `ids` unless the sample is complete; true when it is complete after
// (any of `eos_ids` emitted or max_new_tokens reached).
bool emit_token(std::vector<int>& ids, int token, const GenerateOptions& options, std::span<const int> eos_ids,
                int sample, const TokenSink& sink);

// Samples (and beams) of one request run side by side: every step is one batched forward.
DecodeRun decode_plain(const Backend& target, const GenerateOptions& options, const TokenSink& sink);
DecodeRun decode_speculative(ModelStore& models, const Backend& target, const GenerateOptions& options,
                             const TokenSink& sink);
DecodeRun decode_beam(const Backend& target, const GenerateOptions& options, const TokenSink& sink);
// Beam search with a drafter (runtime/speculative_beam.h): the output of decode_beam, bitwise.
DecodeRun decode_speculative_beam(ModelStore& models, const Backend& target, const GenerateOptions& options,
                                  const TokenSink& sink);

// The draft model's tree shape for `d` (chain of gamma, static tree or dynamic budget; the
// upper bound on a proposal's nodes is draft_tree_nodes, runtime/generate_options.h), and the
// transform drafts rank or draw by (deterministic for greedy and beam).
TreeShape tree_shape(const DraftOptions& d);
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

// The draft model of a request (method = model), its matrices read in DraftOptions::weights.
const Backend& draft_model(ModelStore& models, const DraftOptions& draft);

// KV blocks enough for a shared prefix of `shared_tokens` slots and `sequences` forks of it
// that each add up to `own_tokens` (one more block each for copying a shared partial block).
long long kv_blocks_for(long long shared_tokens, long long own_tokens, long long sequences, int block_size);

// The KV pool (blocks) of a request's target cache, and its draft model's: the pool each
// decoding loop allocates. validate_generate_options checks that it fits in memory (and int).
long long request_kv_blocks(const GenerateOptions& options);

// Samples of one request decode side by side in waves of at most this many sequences (the
// results do not depend on the wave: rows are batch-invariant and each sample has its own
// Philox stream); the KV pool is sized for one wave.
inline constexpr int kSampleWave = 64;

}  // namespace specula
