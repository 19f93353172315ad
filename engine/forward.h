// defines: ForwardContext, what one stream of forwards runs on (a backend, the KV cache its
// sequences live in, the stream's workspace), and its run(): plan the batch from per-sequence
// rows (plan_batch), append their slots and run pending copies (KvCache::prepare), call the
// backend (its forward, or its forward with verification on the device). The driver every caller of the seam uses, for one sequence or many.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/batch.h"
#include "kv/kv_cache.h"
#include "sampling/logit_controls.h"

namespace specula {

// Rows of logits a batch of `parts` returns (kAll: every row, kLast: one, kNone: none).
int logit_rows(std::span<const SequenceRows> parts);
// Rows (tokens) of a batch of `parts` in all.
int batch_rows(std::span<const SequenceRows> parts);

// A chain, or a static tree, drawn whole on the backend's device (ForwardContext::run_chains).
// The forward of `first` (the sequence's rows up to the root, its logits kLast) gives the root's
// distribution. A chain draws each token under `options`, and each token but the last is fed
// as one row (a tree node under the one before, at the root's position + its depth) whose
// logits draw the next. A tree (tree_parents given) draws each context's children from its
// distribution (options' chain) by tree_mode, draw_siblings' rules (a child the distribution
// cannot give is kAbsentDraw, and so is every node under it), and feeds each level with nodes
// below it as one row per node. A dynamic tree (dynamic_width > 0) of `length` nodes grows
// there best-first (DraftRounds::dynamic: the top dynamic_top_k children of each fed context,
// dynamic_width nodes a round); the chains of a call are then all dynamic trees of one shape.
struct DeviceChain {
  SequenceRows first;
  int length = 0;                        // tokens (a tree's nodes) drawn, >= 1
  DrawOptions options;
  std::span<const double> uniforms;      // in [length] each token's uniform; empty where none is read
  // in [length] or empty (a chain): each node's parent, -1 the root, in growth order: a level's
  // nodes after the level above, in their parents' order.
  std::span<const int> tree_parents;
  int tree_mode = kDrawTopK;             // kDraw* code of a tree's children
  int dynamic_width = 0;                 // > 0: a dynamic tree, nodes taken a round
  int dynamic_top_k = 0;                 // a dynamic tree's children pushed per context
  // Where given (not for dynamic trees), every context's logits are edited by these controls
  // over the context's path before its distribution (DraftRounds::controls).
  const PathEdits* controls = nullptr;

  bool is_tree() const { return !tree_parents.empty(); }
  bool is_dynamic() const { return dynamic_width > 0; }
  // Whether its draws read uniforms and their distributions matter to verification.
  bool sampled() const {
    return is_dynamic() ? false : is_tree() ? tree_mode != kDrawTopK : !options.greedy();
  }
};

// One forward of a run of rounds: its rows and its device time.
struct RoundTime {
  int rows = 0;
  double seconds = 0;
};

// Device chains drawn and left on the device (ForwardContext::enqueue_chains).
struct EnqueuedChains {
  std::shared_ptr<const DeviceDraws> draws;
  std::vector<std::vector<int>> draw_of;  // [chain][its length] each token's (node's) draw
  std::vector<int> round_rows;            // [rounds] each round's rows (their seconds: draws->round_seconds())
};

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
  // `chains` (distinct sequences of `cache`) drafted on the backend's device
  // (Backend::forward_draft), round r one forward of every chain (tree) deeper than r. Every
  // round's slots are appended before the first runs; where anything throws, every sequence is
  // as it was.
  //   tokens: out [sum of lengths] each chain's tokens, chains in order
  //   q: out [sum of lengths, vocab] the distribution each token was drawn from, or empty
  //   parents: out [sum of lengths] each node's parent (-1: the root) where the chains are
  //   dynamic trees, else empty
  std::vector<RoundTime> run_chains(std::span<const DeviceChain> chains, std::span<int> tokens,
                                    std::span<float> q, std::span<int> parents = {}) const;
  // The same rounds enqueued (Backend::enqueue_draft) with nothing read back: the draws stay
  // on the device for a forward_verify there, q kept where a chain is sampled. Of dynamic
  // trees the nodes stay: tree i's node j is draw i * length + j.
  EnqueuedChains enqueue_chains(std::span<const DeviceChain> chains) const;
};

}  // namespace specula
