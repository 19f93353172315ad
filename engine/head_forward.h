// defines: HeadForwardContext, what one stream of draft-head forwards runs on (a head backend,
// the head's KV cache, the stream's workspace), and its run(): plan the rows of its sequences,
// append their slots, call the head backend; and enqueue_chains, its rounds of chains and
// static trees left on the head's device. The head's counterpart of ForwardContext.
#pragma once

#include <span>

#include "engine/batch.h"
#include "engine/forward.h"
#include "engine/head_backend.h"
#include "kv/kv_cache.h"

namespace specula {

struct HeadForwardContext {
  const HeadBackend& head;
  const ModelConfig& target;  // the target's config: the token and position bounds of a row
  KvCache& cache;             // the head's pages (HeadBackend::kv_layout)
  Workspace& workspace;

  // One forward of `parts` (sequences of `cache`, each at most once), appending their rows'
  // slots.
  //   x: in [rows, hidden] each row's input state, parts in order; logits: out [logit rows,
  //   draft_vocab]; out: out [rows, hidden] each row's output state (the next step's input)
  void run(std::span<const SequenceRows> parts, std::span<const float> x, std::span<float> logits,
           std::span<float> out) const;
  void run(const SequenceRows& part, std::span<const float> x, std::span<float> logits, std::span<float> out) const {
    run(std::span(&part, 1), x, logits, out);
  }
  // `chains` (distinct sequences of `cache`: chains and static trees, or dynamic trees of one
  // shape) drawn on the head's device and left there (HeadBackend::enqueue_draft): round 0 is
  // every chain's first rows (their input states the head's feature of `taps`), a later round a
  // level of nodes (a dynamic tree's next batch), each fed its parent context's output state
  // (ChainRounds::state_feeds); q kept where a chain is sampled; of dynamic trees the nodes stay
  // (ForwardContext::enqueue_chains). Every round's slots are appended before the first runs;
  // where anything throws, every sequence is as it was.
  //   taps: in [rows of every chain's first, num_taps * target_hidden_size], chains in order
  EnqueuedChains enqueue_chains(std::span<const DeviceChain> chains, std::span<const float> taps) const;
};

}  // namespace specula
