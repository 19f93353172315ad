// defines: SpeculativeSequence, one sequence decoded speculatively step by step (draft,
// verify forward, sampling + verification, commit) in phases a batched driver can
// interleave with other sequences'; run_drafts, their batched draft phase; verify_forward,
// the target forward they share with speculative beam search; speculative_step,
// a driver of whole steps: the draft forwards of all
// sequences round by round (one call per draft cache), then one target forward with every
// sequence's root and tree; and SpeculativeStats, the counters and times the steps accumulate.
// The scheduler (runtime/scheduler.h) runs the phases with other sequences' rows in the same
// target forward; tests drive sequences directly to inspect the caches between steps.
#pragma once

#include <memory>
#include <vector>

#include "draft/drafter.h"
#include "engine/forward.h"
#include "runtime/lap_timer.h"
#include "sampling/logit_controls.h"
#include "sampling/sampler.h"
#include "sampling/token_logprob.h"
#include "verify/verify_rule.h"

namespace specula {

struct SpeculativeStats {
  long steps = 0;                       // sequence steps (a batched step of k sequences counts k)
  long drafted = 0;                     // tree nodes proposed (a device tree's absent nodes not counted)
  long accepted = 0;                    // tree nodes accepted
  std::vector<long> accepted_at_depth;  // [depth - 1] steps whose accepted path reached depth
  long siblings = 0;                    // of the drafted nodes, siblings of a chain's first token (DraftBound::siblings)
  long siblings_accepted = 0;           // steps whose accepted path began with such a sibling
  long target_forwards = 0;             // batched target forwards
  long target_rows = 0;                 // rows of those forwards
  double draft_s = 0, verify_forward_s = 0, sample_verify_s = 0, commit_s = 0;
  // [depth - 1][sibling rank]: children tried along accepted paths (a context's children are
  // tried in node order up to the accepted one, or all), and those accepted: the censored
  // evidence of Sequoia's acceptance vector (draft/sequoia_tree.h).
  std::vector<std::vector<long>> rank_tried, rank_accepted;

  // Counts one verified tree's ranks along its accepted path (node indices, root-down).
  void count_ranks(const TokenTree& tree, std::span<const int> accepted_nodes);
};

// The target rows that verify a tree after `committed` (whose last token, the root, is not
// in `seq`'s cache): [root] + nodes, parents [-1] + (parent + 1), positions root position +
// depth, logits of every row; row c of those logits is context c of the tree. The rows
// point into this object's buffers. With `grown_on_device` (a dynamic tree left on its draft
// device: the tree a chain of placeholders, DeviceVerify::draws) every node's position is the
// root's + 1, the least the device may write, so that no planned bound is short.
struct TreeVerifyRows {
  std::vector<int> tokens, positions, parents;
  SequenceRows build(KvCache::SeqId seq, std::span<const int> committed, const TokenTree& tree,
                     bool grown_on_device = false);
};

// A step's chain, its first token's siblings (Proposal::siblings) apart: the tokens it drafted
// and accepted, whether it stopped short of its max_depth at its bound's stop_below, and the
// siblings proposed beside its first token and whether one of them was accepted.
struct ChainStep {
  int drafted = 0, accepted = 0;
  bool stopped = false;
  int siblings = 0;
  bool sibling_accepted = false;
};

class SpeculativeSequence {
 public:
  // `seq` (owned, freed on destruction) of target.cache holds every committed token but the
  // last, the root; `committed` is the prompt (and anything generated before). Sampled steps
  // are verified with `rule` (greedy ones with verify_greedy, what every rule reduces to).
  SpeculativeSequence(const ForwardContext& target, KvCache::SeqId seq, std::unique_ptr<Drafter> drafter,
                      const Sampler& sampler, std::vector<int> committed, Philox rng, VerifyRule rule,
                      RowControls controls = {});
  ~SpeculativeSequence();
  SpeculativeSequence(const SpeculativeSequence&) = delete;
  SpeculativeSequence& operator=(const SpeculativeSequence&) = delete;

  // One speculative step with a tree grown within `bound`, this sequence alone. Returns the
  // emitted tokens (accepted + one bonus/corrected), already appended to committed().
  const VerifyResult& step(DraftBound bound, SpeculativeStats& stats);

  // The phases of a step, for speculative_step():
  // 1. the drafter's proposal (Drafter::start; its pending forwards run by the driver),
  void start_draft(DraftBound bound) { drafter_->start(committed_, bound, rng_); }
  //    or a plain step instead: no proposal, the root row alone (the drafter sleeps through
  //    it and catches up at its next start),
  void start_plain() { plain_ = true; }
  // 2. the target rows to verify it: the root and every node (logits of every row),
  const SequenceRows& verify_rows();
  // 3. sampling + verification of those rows' logits (in [tree size + 1, vocab]) and commit,
  const VerifyResult& verify_and_commit(std::span<const float> logits, SpeculativeStats& stats);
  //    or, where the target's backend verifies on its device (log-probabilities come back
  //    with the verdict), the step's tree for the forward (Backend::forward_verify; `part`:
  //    its index in the forward's parts, `sampling`: the options this sequence's sampler was
  //    made from; a chain left on the draft device goes as its draws; logit controls as each
  //    context's edits over its path, made on the device over draws), drawing the step's
  //    uniforms as verify_and_commit would,
  bool verifies_on_device() const;
  DeviceVerify device_verify(int part, const SamplingOptions& sampling);
  //    and the commit of the verdict that came back (with the drafted tokens of draws).
  const VerifyResult& commit_verdict(DeviceVerdict verdict, SpeculativeStats& stats);

  // From now on verify_and_commit() also gives each emitted token's log-probability with
  // `top_n` alternatives from `source`'s distribution of its row (last_logprobs()).
  void record_logprobs(int top_n, LogprobSource source) { logprob_top_ = top_n, logprob_source_ = source; }
  // The last step's emitted tokens' log-probabilities (empty unless recorded).
  const std::vector<TokenLogprob>& last_logprobs() const { return logprobs_; }

  const std::vector<int>& committed() const { return committed_; }
  // The last step's chain (after verify_and_commit()).
  ChainStep last_chain() const;
  KvCache::SeqId seq() const { return seq_; }
  Drafter& drafter() { return *drafter_; }
  // The rows the drafter's model would feed before the root's if it drafted now (its catch-up).
  int draft_catch_up_rows() const { return drafter_->catch_up_rows(static_cast<int>(committed_.size())); }
  // The most tokens the drafter could propose now (Drafter::proposal_limit).
  int proposal_limit() { return drafter_->proposal_limit(committed_); }
  // Between steps: the random stream where the next step continues it, and the drafter
  // handed out (a preempted sequence keeps both to resume exactly where it stopped).
  const Philox& rng() const { return rng_; }
  std::unique_ptr<Drafter> release_drafter() { return std::move(drafter_); }

 private:
  ForwardContext target_;
  KvCache::SeqId seq_;
  std::unique_ptr<Drafter> drafter_;
  const Sampler& sampler_;
  VerifyRule rule_;
  RowControls controls_;  // each context's row edited over committed_ and that context's path
  std::vector<int> committed_;
  Philox rng_;
  Proposal proposal_;
  bool plain_ = false;  // this step has no proposal
  SequenceRows verify_rows_;
  int prefix_ = 0;  // target cache length before the verify rows
  VerifyResult result_;
  // Commits result_: the target keeps the root and the accepted path, the drafter follows; counts it.
  const VerifyResult& commit(SpeculativeStats& stats, Clock::time_point mark);
  int logprob_top_ = -1;  // < 0: no log-probabilities
  LogprobSource logprob_source_ = LogprobSource::kRaw;
  std::vector<TokenLogprob> logprobs_;
  // Scratch reused across steps.
  std::vector<float> p_, processed_row_, edited_;
  std::vector<int> context_path_;
  TreeVerifyRows rows_;
  std::vector<int> argmaxes_, path_;
  std::vector<int> draw_codes_;     // device_verify's draw codes, [tree size + 1]
  std::vector<double> uniforms_;    // device_verify's uniforms
  std::vector<TokenEdit> edits_, context_edits_;  // device_verify's logit edits, and one context's
  std::vector<int> edit_first_;     // device_verify's first edit of each context, [tree size + 2]
  PathEdits path_edits_;            // device_verify's controls over paths drawn on the device
};

// What run_drafts did on devices: the proposals drawn there (Drafter::drawn_on_device: a draft
// model's device_chain, a head's or Medusa heads' proposal left there), and the rounds whose
// draws were left there for the target's verification (DeviceRounds).
struct DeviceDrafting {
  int chains = 0;
  std::vector<DeviceRounds> left;
};

// Starts a proposal within bounds[i] for every sequence of `seqs` and runs their drafters'
// forwards (run_draft_forwards: chains and static trees drawn whole on a draft device, then
// round by round, those sharing a forward context (one draft cache) as one batched call; each
// appended to `calls` when given); afterwards every verify_rows() is ready. With `device_verify` (the
// caller verifies on the target's device where verifies_on_device()), the device chains and
// the heads' (EAGLE, Medusa) proposals of those sequences stay on the device for device_verify.
DeviceDrafting run_drafts(std::span<SpeculativeSequence* const> seqs, std::span<const DraftBound> bounds,
                          std::vector<DraftCall>* calls = nullptr, bool device_verify = false);

// The verify forward of a speculative step: `target`'s logits of `parts` (returned, [logit
// rows of parts, vocab]), counted in `stats` (a target forward, its rows, and the seconds
// from `start` in verify_forward_s).
std::vector<float> verify_forward(std::span<const SequenceRows> parts, const ForwardContext& target,
                                  SpeculativeStats& stats, Clock::time_point start);

// One step of every sequence in `seqs` (their trees grown within bounds[i]), batched:
// draft forwards of drafters sharing a forward context run as one call per round, and all
// verify rows as one forward of `target` (every sequence's target cache). Returns each
// sequence's result in order.
std::vector<const VerifyResult*> speculative_step(std::span<SpeculativeSequence* const> seqs,
                                                  std::span<const DraftBound> bounds, const ForwardContext& target,
                                                  SpeculativeStats& stats);

}  // namespace specula
