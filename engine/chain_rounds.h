// defines: ChainRounds, the rounds of device chains (engine/forward.h's DeviceChain) planned
// on a cache as one DraftRounds, their planners (plan_chain_rounds, plan_dynamic_rounds),
// check_chains and with_rollback: the host half that ForwardContext::run_chains and
// enqueue_chains (a draft model's rounds) and HeadForwardContext::enqueue_chains (a head's)
// share.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "base/error.h"
#include "engine/device_draft.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "model/model_config.h"

namespace specula {

// Every round of `chains` planned on a cache (their slots appended) as one DraftRounds;
// draw_of[i] lists chain i's draws, node by node (of dynamic trees, the nodes: tree i's node j
// is i * length + j).
struct ChainRounds {
  DraftRounds draft;
  std::vector<std::vector<int>> draw_of;
  std::vector<int> round_rows;  // [rounds] each round's rows
  // [rows of every round] the row, numbered across rounds, whose output state a row takes as
  // its input (a head's rounds): a node's, its parent context's (the root context's: its
  // chain's last first row); -1 for the first round's rows. Of dynamic trees, every later row's
  // is its tree's root context row, which the device rewrites for a node under another node
  // (DynamicTreeArgs::next_state_rows).
  std::vector<int> state_feeds;
};

// Throws SpeculaError naming the chain unless each is well formed; returns their tokens in all.
std::size_t check_chains(std::span<const DeviceChain> chains);

// Round 0 is every chain's first rows; round r > 0 feeds a chain's nodes of depth r (a
// contiguous run) when it is deeper than r, each its draw's token at its position under its
// ancestors. A logit row's draws are its context's children, in node order. Where any chain is
// a tree, every logit row draws through children (a chain's: one, kDrawTopK of the one-hot
// greedy distribution or kDrawSampled). A chain's controls edit each of its logit rows over the
// draws of its context's path (DraftRounds::controls). Batches are planned with `config`'s token
// and position bounds.
ChainRounds plan_chain_rounds(KvCache& cache, const ModelConfig& config, std::span<const DeviceChain> chains,
                              bool keep_q);

// Dynamic trees (check_chains: one shape): round 0 is every tree's first rows, round r > 0
// `width` placeholder rows a tree (token 0 at the root's position + 1, node (r - 1) * width +
// k under every earlier node, so that its mask has room for any ancestry) that the device
// rewrites from the nodes it took; every logit row draws top_k children by kDrawTopK.
ChainRounds plan_dynamic_rounds(KvCache& cache, const ModelConfig& config, std::span<const DeviceChain> chains);

// run(), and where it throws, every chain's sequence truncated back to its length before.
template <class Run>
auto with_rollback(KvCache& cache, std::span<const DeviceChain> chains, Run run) {
  SPECULA_CHECK(cache.state_width() == 0, "device draft: the draft cache keeps states, which forward_draft does not write");
  std::vector<int> lengths;
  for (const DeviceChain& c : chains) lengths.push_back(cache.length(c.first.seq));
  try {
    return run();
  } catch (...) {
    for (std::size_t i = 0; i < chains.size(); ++i) cache.truncate(chains[i].first.seq, lengths[i]);
    throw;
  }
}


}  // namespace specula
