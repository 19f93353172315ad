// defines: DeviceVerify, one sequence of a forward whose draft tree is sampled and verified on
// the backend's device right after the forward computes its contexts' logits
// (Backend::forward_verify), DeviceVerdict, all that comes back of it, DeviceTimes, and their
// checks. The tree is flat and
// the sampling options are plain numbers: engine/ sees neither verify/'s TokenTree nor
// sampling/'s SamplingOptions; the logit controls come as sampling/'s plain TokenEdit lists.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "engine/batch.h"
#include "engine/device_draft.h"
#include "sampling/logit_controls.h"

namespace specula {

// How a sampled tree is verified: the values of verify/verify_rule.h's VerifyRule.
inline constexpr int kRuleToken = 0;      // verify_stochastic (verify/verifier.h)
inline constexpr int kRuleBlock = 1;      // verify_block (verify/block_verifier.h): chains
inline constexpr int kRuleTraversal = 2;  // verify_traversal (verify/traversal_verifier.h)

// Which distribution the emitted tokens' log-probabilities are taken from: the values of
// sampling/token_logprob.h's LogprobSource, and its bound on the alternatives.
inline constexpr int kLogprobRaw = 0;        // log softmax of the target's logits
inline constexpr int kLogprobProcessed = 1;  // log p, the distribution the sampler draws from
inline constexpr int kMaxDeviceLogprobs = 20;

// Batch span `part` holds the tree's root and its n nodes, logits of every row: row c of the
// span is context c (0 the root, c > 0 after node c - 1). Temperature 0 verifies greedily
// (verify_greedy over each context's argmax, ties to the lowest id); otherwise p at each
// context is sampling/'s chain (temperature, then top-k when top_k > 0, top-p when top_p < 1,
// min-p when min_p > 0) and verification is `rule`'s (kRule*: verify_stochastic's recursive
// rejection rule, verify_block's for a chain, or verify_traversal's; the same uniforms).
struct DeviceVerify {
  int part = -1;
  std::span<const int> tokens;   // in [n] drafted token of each node
  std::span<const int> parents;  // in [n] parent node (local), -1 = the root; parents[i] < i
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  float min_p = 0;
  // Stochastic only:
  std::span<const int> draw;         // in [n + 1] kDraw* code of each context's children
  std::span<const float> q;          // in [n + 1, vocab] draft distributions; empty when no context's children are drawn from q
  std::span<const double> uniforms;  // in [2 n + 1] verify/verifier.h's layout
  int rule = kRuleToken;             // kRule* code (kRuleBlock: a chain, parents[i] = i - 1)
  // A tree drawn on the device and left there (Backend::enqueue_draft): node i's token is
  // draw node_draws[i] of `draws` (`tokens` holds placeholders; an absent draw, kAbsentDraw,
  // takes its node and all under it out of the verification), and where stochastic, q at each
  // context is the distribution its children were drawn from (`q` empty).
  // Of dynamic trees (DeviceDraws::tree_budget() > 0) the structure too is the device's: the
  // n = tree_budget() nodes are draws s * n .. s * n + n - 1 in order, and `parents` is a chain
  // (parents[i] = i - 1), the placeholder whose rows have room for any tree of n nodes: the
  // device writes each node row's position (the root's + its depth), mask (the root, its
  // ancestors, itself) and attention window, and the verification's parents.
  const DeviceDraws* draws = nullptr;
  std::span<const int> node_draws;  // in [n] when draws
  // Where logprob_top >= 0: each emitted token's log-probability under logprob_source
  // (kLogprob*: sampling/token_logprob.h's definitions, greedy's processed distribution one-hot)
  // and its logprob_top most probable alternatives, ties to the lower id.
  int logprob_top = -1;  // in [-1, kMaxDeviceLogprobs]
  int logprob_source = kLogprobRaw;
  // Logit controls (sampling/logit_controls.h), where edit_first is not empty: context c's
  // row is edited by edits[edit_first[c], edit_first[c + 1]) (edited_logit under these
  // penalties) before the sampler reads it, greedy or not; raw log-probabilities read the
  // unedited row, processed ones the sampler's. Not with draws (their paths are the device's):
  // there, where path_edits is given (not for dynamic trees), context c's row is edited on the
  // device by them over its path's tokens (PathEdits' rule), the nodes from the root down.
  std::span<const TokenEdit> edits;
  std::span<const int> edit_first;  // [n + 2] or empty
  float repetition_penalty = 1, frequency_penalty = 0, presence_penalty = 0;
  const PathEdits* path_edits = nullptr;
  bool greedy() const { return temperature == 0; }
};

// What verification emitted, as verify/verifier.h's VerifyResult holds it.
struct DeviceVerdict {
  std::vector<int> accepted_nodes;  // node indices along the accepted path, root-down
  std::vector<int> tokens;          // the accepted tokens, then one bonus / corrected token
  std::vector<int> drafted;         // [n] each node's token as drawn (or kAbsentDraw), when DeviceVerify::draws
  std::vector<int> parents;         // [n] each node's parent as grown (-1: the root), when the draws are dynamic trees
  // Where DeviceVerify::logprob_top >= 0, per emitted token: its log-probability, and its
  // alternatives (token, log-probability), most probable first (a processed distribution's
  // only from its support).
  std::vector<double> logprobs;                          // [tokens]
  std::vector<std::vector<std::pair<int, double>>> top;  // [tokens][<= logprob_top]
};

// Where a forward that verified on the device spent its time, between events on its stream:
// the forward's kernels (the pending copies and the uploads included), then the sampling and
// verification kernels.
struct DeviceTimes {
  double forward_s = 0;
  double sample_verify_s = 0;
};

// The first logit row of batch span `part` (logit rows are numbered in batch order).
int first_logit_row(const RaggedBatch& batch, int part);

// Throws SpeculaError naming the entry and the field unless each of `verify` fits `batch` for
// a model of `vocab` tokens: distinct parts of the batch whose every row is a logit row and
// whose row count is its tree's n + 1, parents local and topological, tokens in the
// vocabulary, options in range (temperature finite and >= 0, top_k >= 0, top_p in (0, 1],
// min_p in [0, 1]), a rule code, not the token rule's where greedy, block's only for a chain,
// and for stochastic entries n + 1 draw codes, 2 n + 1 uniforms in [0, 1),
// and q empty or [n + 1, vocab] (present when a context's children are drawn from q, unless
// the draws hold it); with draws, n draw indices within them, and q kept where a stochastic
// context's children are drawn from it; with dynamic trees' draws, a whole tree's draws in
// order, a chain of placeholder parents, no block rule, and every context's children kDrawTopK;
// logprob_top in [-1, kMaxDeviceLogprobs] and a kLogprob* source; edits without draws, each
// context's ascending distinct tokens in the vocabulary with counts >= 0 and finite biases,
// edit_first from 0 to edits' size, and finite penalties; path edits only with draws of a
// static tree or chain, their tokens likewise, penalties finite and repetition > 0.
void check_device_verify(const RaggedBatch& batch, std::span<const DeviceVerify> verify, int vocab);

}  // namespace specula
