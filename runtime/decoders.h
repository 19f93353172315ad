// defines: the decoding loops behind generate() — plain (one target forward per token,
// any token sampler), speculative (a drafter proposes, the target verifies a tree per
// forward) and beam search — and DecodeRun, what each returns for generate() to report.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "engine/model.h"
#include "runtime/generate.h"

namespace specula {

struct DecodeRun {
  std::vector<std::vector<int>> samples;  // new tokens of each sample (beam: the n-best)
  double prefill_s = 0;
  double decode_s = 0;
  int target_forwards = 0;
  KvStats kv;                 // of the target cache, after every sequence was freed
  nlohmann::json extra;       // strategy-specific stats merged into "stats"
};

// Appends `token` to `ids` unless the sample is complete; true when it is complete after
// (EOS emitted or max_new_tokens reached).
bool emit_token(std::vector<int>& ids, int token, const GenerateOptions& options, int eos_id, int sample,
                const TokenSink& sink);

DecodeRun decode_plain(Model& target, const GenerateOptions& options, const TokenSink& sink);
DecodeRun decode_speculative(ModelStore& models, Model& target, const GenerateOptions& options, const TokenSink& sink);
DecodeRun decode_beam(Model& target, const GenerateOptions& options, const TokenSink& sink);

// A new sequence of `cache` holding `tokens` at positions 0, 1, ... (one causal forward; none
// when tokens is empty). Returns it; the next-token logits after the last token go to
// last_logits (out, resized to [vocab]).
PagedKvCache::SeqId prefill(Model& model, PagedKvCache& cache, std::span<const int> tokens,
                            std::vector<float>& last_logits);

// Throws SpeculaError unless `draft` shares the target's vocabulary, special ids and pieces.
void check_draft_compatible(const Model& target, const Model& draft);

// The draft model of a request (method = model), loaded with its matrices in the requested
// dtype (DraftOptions::weights; throws SpeculaError naming --draft-weights for an unknown one).
Model& draft_model(ModelStore& models, const DraftOptions& draft);

// KV blocks enough for `sequences` sequences of up to `tokens` slots each. Samples run one
// after another, so a pool serves the shared prefill and one live sample (2 sequences).
int kv_blocks_for(int tokens, int sequences, int block_size);

}  // namespace specula
