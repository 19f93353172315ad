// defines: ForwardContext, what one stream of forwards runs on (a backend, the KV cache its
// sequences live in, the stream's workspace), and its run(): plan the batch from per-sequence
// rows (plan_batch), append their slots and run pending copies (KvCache::prepare), call the
// backend (its forward, or its forward with verification on the device). The driver every caller of the seam uses, for one sequence or many.
#pragma once

#include <span>

#include "engine/backend.h"
#include "engine/batch.h"
#include "kv/kv_cache.h"

namespace specula {

// Rows of logits a batch of `parts` returns (kAll: every row, kLast: one, kNone: none).
int logit_rows(std::span<const SequenceRows> parts);
// Rows (tokens) of a batch of `parts` in all.
int batch_rows(std::span<const SequenceRows> parts);

struct ForwardContext {
  const Backend& backend;
  KvCache& cache;
  Workspace& workspace;

  // One forward of `parts` (distinct sequences of `cache`), appending their rows' slots (and,
  // where the cache keeps states, KvCache::keep_states, each row's states at its slot).
  // Throws ResourceExhausted with every sequence unchanged when the pool cannot hold them.
  //   logits: out [logit_rows(parts), vocab], sequences in order
  void run(std::span<const SequenceRows> parts, std::span<float> logits) const;
  void run(const SequenceRows& part, std::span<float> logits) const { run(std::span(&part, 1), logits); }
  // The same forward, with the sequences of `verify` (DeviceVerify::part indexes `parts`)
  // sampled and verified on the backend's device (Backend::forward_verify): their logit rows
  // are not written to `logits`. Returns the device's times (zeros when `verify` is empty).
  //   verdicts: out [verify.size()]
  DeviceTimes run(std::span<const SequenceRows> parts, std::span<float> logits, std::span<const DeviceVerify> verify,
                  std::span<DeviceVerdict> verdicts) const;
};

}  // namespace specula
