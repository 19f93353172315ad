// defines: SchedulerLimits (the settings that bound one scheduler step: live sequences, rows
// of the target forward, prompt tokens, KV pool), the per-request bounds the scheduler plans
// with (largest draft tree, KV blocks of a row append, KV blocks a request needs alone), the
// drafter shape of a request's options, and check_request_fits, the refusal at submission
// of a request that could not run even alone.
#pragma once

#include "base/option_names.h"
#include "draft/model_drafter.h"
#include "runtime/generate_options.h"

namespace specula {

struct SchedulerLimits {
  int max_sequences = 64;    // live sequences (one per sample) with rows in a step
  int max_rows = 4096;       // rows of one target forward
  int prefill_tokens = 1024; // prompt and recompute tokens per step, over all prefill chunks
  int kv_blocks = 0;         // target KV pool in blocks (the draft pools get as many, plus slack)
};

// Throws SpeculaError naming the field unless every limit is >= 1.
void validate_limits(const SchedulerLimits& limits);

// The drafter shape of `d` (a chain of gamma, a static tree or a dynamic budget).
TreeShape tree_shape(const DraftOptions& d);

// Upper bound on the nodes of one proposal of `d` (0 without a drafter).
int max_tree_nodes(const DraftOptions& d);

// Blocks of `block_size` slots needed to hold `tokens` slots.
int blocks_for(int tokens, int block_size);

// Upper bound on the new blocks appending `rows` slots to a sequence of `length` slots takes
// (the blocks it grows by, and one copy of a shared partly filled last block).
int append_blocks(int length, int rows, int block_size);

// KV blocks enough for a shared prefix of `shared_tokens` slots and `sequences` forks of it
// that each add up to `own_tokens` (one more block each for copying a shared partial block).
long long kv_blocks_for(long long shared_tokens, long long own_tokens, long long sequences, int block_size);

// KV blocks one request needs when it runs alone with `sequences` samples live at once: its
// shared prompt and each sample's own tokens and largest tree (beam search: its beams and
// their forks, `sequences` unused); saturates at INT_MAX, which validate_generate_options
// refuses (the pool must fit in memory).
int request_kv_blocks(const GenerateOptions& o, int sequences);

// KV blocks the smallest pool that runs `o` alone holds: its parked prompt and one sample
// recomputed from scratch at its longest.
int request_min_kv_blocks(const GenerateOptions& o);

// The target pool a scheduler for `o` gets: o.kv_pool_blocks when set, else `sized`.
inline int kv_pool_blocks_or(const GenerateOptions& o, int sized) { return o.kv_pool_blocks > 0 ? o.kv_pool_blocks : sized; }

// Throws SpeculaError (naming the limit and the request's sizes) when `o` cannot run even
// alone under `limits`: one sample's rows in one step over max_rows, or the blocks of its
// prompt plus one recomputed sample over kv_blocks.
void check_request_fits(const GenerateOptions& o, const SchedulerLimits& limits);

}  // namespace specula
