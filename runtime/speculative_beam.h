// defines: BeamDrafters (how the live beams of a search get drafters: one for the prompt, one
// per child beam from its parent's), SpeculativeBeam (one beam-search request decoded
// speculatively, in phases a batch scheduler can interleave with other requests': drafts,
// verify rows, replay + KV fork/commit) and speculative_beam_step, the driver of one step of
// one request: every beam's draft forwards batched per round, then ONE target forward with
// every beam's root and tree, then the replay (runtime/beam_replay.h).
//
// Invariant between steps, per live beam: its target sequence caches its committed tokens
// (prompt + generated) but the last, the root; its drafter's cache holds a prefix of them.
// A step: each beam's tree after its root; the rows [root] + nodes of every beam appended to
// its sequence in one forward; the replay takes d >= 1 beam steps; each new beam is its
// origin's sequence (the first child) or a fork of it (the others, all forks before any
// commit), committed to the origin's prefix + root + the path of its first d - 1 new tokens;
// origins without a child are freed. The output equals plain beam search's bitwise because
// every row the rule reads is batch-invariant: the same logits a one-token decode gives.
#pragma once

#include <memory>
#include <vector>

#include "draft/draft_options.h"
#include "draft/drafter.h"
#include "engine/forward.h"
#include "runtime/beam_replay.h"
#include "runtime/speculative_sequence.h"
#include "sampling/beam_search.h"

namespace specula {

class BeamDrafters {
 public:
  virtual ~BeamDrafters() = default;
  // The drafter of the prompt beam.
  virtual std::unique_ptr<Drafter> root() = 0;
  // The drafter of a beam that extends `parent`'s beam, whose committed tokens were the first
  // `parent_committed` of the child's (parent's last tree is discarded; parent stays usable).
  virtual std::unique_ptr<Drafter> child(Drafter& parent, int parent_committed) = 0;
  // Called once for every drafter before it is destroyed.
  virtual void retire(Drafter& /*drafter*/) {}
  // Draft-model forwards of the drafters retired so far.
  virtual long draft_forwards() const { return 0; }
};

// The drafters of `d` for beams: a draft model (`draft`: its context, `draft_root_seq`: a
// sequence of its cache holding a prefix of the prompt, the caller's) with the deterministic
// top-k tree of tree_shape(d) per beam — a child forks its parent's draft sequence cut back
// to the parent's committed tokens and catches up on the rest — or an n-gram proposer (a
// child is a copy of its parent's, which saw a prefix of the child's tokens). Adaptive chains
// are refused (validate_options), since every beam's drafter is new after each step.
std::unique_ptr<BeamDrafters> make_beam_drafters(const DraftOptions& d, const ForwardContext* draft,
                                                 KvCache::SeqId draft_root_seq);

class SpeculativeBeam {
 public:
  // `seq` (owned) of target.cache holds the prompt but its last token. The search's options,
  // controls and ends are BeamSearch's; the drafters ignore the controls (the replay is exact for
  // any draft).
  SpeculativeBeam(const ForwardContext& target, KvCache::SeqId seq, BeamDrafters& drafters,
                  const SamplingOptions& options, int max_new_tokens, std::span<const int> eos_ids,
                  std::span<const int> prompt, const LogitControls& controls = {}, HypothesisEnds ends = {});
  ~SpeculativeBeam();  // frees every live beam's sequence and drafter
  SpeculativeBeam(const SpeculativeBeam&) = delete;
  SpeculativeBeam& operator=(const SpeculativeBeam&) = delete;

  bool done() const { return search_.done(); }

  // The phases of a step (speculative_beam_step runs them for one request):
  // 1. every live beam's drafter starts a tree, at most (tokens left - 1) deep; their pending
  //    forwards are run by the caller (run_draft_forwards),
  std::span<Drafter* const> start_drafts();
  // 2. the target rows: per live beam its root and tree (logits of every row), in beam order,
  std::span<const SequenceRows> verify_rows();
  // 3. the replay over those rows' logits (in [sum of the rows, vocab], in verify_rows order),
  //    then the KV forks and commits of the beams reached. Returns the beam steps taken.
  int finish(std::span<const float> logits, SpeculativeStats& stats);

  // The n-best hypotheses once done().
  BeamResult result(int n_best) && { return std::move(search_).result(n_best); }
  int beam_steps() const { return search_.steps(); }

  // The live beams (for tests): target sequence, committed tokens, drafter.
  int num_beams() const { return static_cast<int>(beams_.size()); }
  KvCache::SeqId seq(int beam) const { return beams_[static_cast<std::size_t>(beam)].seq; }
  const std::vector<int>& committed(int beam) const { return beams_[static_cast<std::size_t>(beam)].committed; }
  Drafter& drafter(int beam) const { return *beams_[static_cast<std::size_t>(beam)].drafter; }

 private:
  struct Beam {
    KvCache::SeqId seq;
    std::vector<int> committed;  // prompt + generated; the last is the root
    std::unique_ptr<Drafter> drafter;
    Proposal proposal;
    int prefix = 0;  // target cache length before the verify rows
    TreeVerifyRows rows;
  };
  void release_all();

  ForwardContext target_;
  BeamDrafters& drafters_;
  BeamSearch search_;
  std::vector<Beam> beams_;
  Philox unused_rng_{0};  // deterministic drafts read no random numbers
  std::vector<Drafter*> drafter_ptrs_;
  std::vector<SequenceRows> verify_rows_;
};

// One step of `beam` (not done): drafts (batched per draft cache), one target forward of
// every beam's rows, replay and commit. Returns the beam steps taken.
int speculative_beam_step(SpeculativeBeam& beam, const ForwardContext& target, SpeculativeStats& stats);

}  // namespace specula
