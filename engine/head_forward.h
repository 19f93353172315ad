// defines: HeadForwardContext, what one stream of draft-head forwards runs on (a head backend,
// the head's KV cache, the stream's workspace), and its run(): plan the rows of one sequence,
// append their slots, call the head backend. The head's counterpart of ForwardContext.
#pragma once

#include <span>

#include "engine/batch.h"
#include "engine/head_backend.h"
#include "kv/kv_cache.h"

namespace specula {

struct HeadForwardContext {
  const HeadBackend& head;
  const ModelConfig& target;  // the target's config: the token and position bounds of a row
  KvCache& cache;             // the head's pages (HeadBackend::kv_layout)
  Workspace& workspace;

  // One forward of `part` (a sequence of `cache`), appending its rows' slots.
  //   x: in [rows, hidden] each row's input state; logits: out [logit rows, draft_vocab];
  //   out: out [rows, hidden] each row's output state (the next step's input)
  void run(const SequenceRows& part, std::span<const float> x, std::span<float> logits, std::span<float> out) const;
};

}  // namespace specula
