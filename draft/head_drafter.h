// defines: HeadDrafter, the proposer that drafts with a head on the target's hidden states
// (EAGLE-3 or EAGLE-1, engine/head_backend.h): a chain, a static tree of any topology or a
// dynamic tree (draft/tree_growth.h), grown on the head's own paged cache. Its step, for
// committed tokens t_0 .. t_{n-1} (t_{n-1} the root, not yet in the target's cache):
//   - the head's cache holds one entry per committed token t_j, j >= 1, fed with the target's
//     states of t_{j-1} (read from the target cache's state store, KvCache::keep_states)
//     turned into the head's feature (HeadBackend::project), at RoPE position j; the
//     catch-up feeds the entries it lacks, the root's last, whose logits are the root's draft
//     distribution;
//   - a tree node's entry is fed with the output state of its parent context's entry (the
//     root context's: the root's entry), at position root position + depth, one head forward
//     per feed the tree's growth asks for;
//   - after verification every tree entry is dropped (the next catch-up feeds the accepted
//     tokens again, with the target's states of the path the target verified).
// Its forwards are pending forwards (Drafter::head_context), so run_draft_forwards batches
// every sequence's of one head into one call per round; or, where the head's backend draws on
// its device, a chain, static tree or dynamic tree may be drawn there whole
// (Drafter::head_device_chain) with the same entries, left there for the target's verification.
#pragma once

#include <optional>
#include <vector>

#include "draft/drafter.h"
#include "draft/model_drafter.h"
#include "draft/tree_growth.h"
#include "engine/head_forward.h"
#include "sampling/logit_controls.h"

namespace specula {

// The inputs of the entries a head's cache holding `cached` entries lacks, tokens[cached +
// 1 .. tokens.size()): token j with the target's states of slot j - 1 of `target_seq`
// (target_cache must hold them), at position j.
//   taps: out [entries, num_taps * target_hidden_size]; entry_tokens, positions: out [entries]
void head_entry_taps(int cached, KvCache& target_cache, KvCache::SeqId target_seq,
                     std::span<const int> tokens, std::vector<float>& taps, std::vector<int>& entry_tokens,
                     std::vector<int>& positions);

// Feeds `seq` of head.cache (which holds the entries of tokens[1 .. cached]) the entries of
// tokens[cached + 1 .. tokens.size()) (head_entry_taps, each fed the head's feature of its taps,
// HeadBackend::project) in one forward.
//   logits: out [draft_vocab] of the last entry; out: out [entries, hidden] each entry's output state
void feed_head_entries(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache,
                       KvCache::SeqId target_seq, std::span<const int> tokens, std::vector<float>& logits,
                       std::vector<float>& out);

class HeadDrafter : public Drafter {
 public:
  // `seq`: this drafter's sequence in head.cache (owned, freed on destruction; it may hold a
  // prefix of the entries already, feed_head_entries, as a fork of its prompt's). The target's
  // states of `target_seq` are read from `target_cache`, which keeps the head's tap layers.
  // `stochastic`: children are sampled from `distribution` (chains i.i.d., static trees
  // without replacement) and q is returned; otherwise they are its top-k. `device`: the options
  // `distribution` applies, as the head backend's device draws with them (greedy when
  // !stochastic); where given and the backend draws on its device, a chain (with or without
  // siblings), a static tree or a dynamic tree may be drawn there whole (ModelDrafter's rules
  // for its uniforms and controls).
  HeadDrafter(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache, KvCache::SeqId target_seq,
              DistributionFn distribution, bool stochastic, TreeShape shape, RowControls controls = {},
              std::optional<DrawOptions> device = std::nullopt);
  ~HeadDrafter() override;
  HeadDrafter(const HeadDrafter&) = delete;
  HeadDrafter& operator=(const HeadDrafter&) = delete;

  void start(std::span<const int> committed, DraftBound bound, Philox& rng) override;
  const SequenceRows* pending_forward() override { return pending_ ? &*pending_ : nullptr; }
  const HeadForwardContext* head_context() const override { return &head_; }
  std::span<const float> pending_states() override;
  void head_forward_done(std::span<const float> logits, std::span<const float> out) override;
  int catch_up_rows(int committed) const override { return std::max(0, committed - 2 - head_.cache.length(seq_)); }
  std::optional<DynamicDraft> head_device_shape() const override {
    return catching_up_ && device_shape_.on() ? std::optional(device_shape_.dynamic) : std::nullopt;
  }
  HeadChain head_device_chain() override;
  void chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws) override;
  bool drawn_on_device() const override { return drawn_on_device_; }
  Proposal take_proposal() override { return growth_.take(head_.target.vocab_size); }
  void accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int> committed) override;

  int draft_forwards() const { return forwards_; }
  int gamma() const { return growth_.gamma(); }  // the chain length the next proposal starts from

 private:
  int hidden() const { return head_.head.config().hidden_size(); }
  // The pending forward of the tree's next feed (none once the tree is complete).
  void request_feed();
  // q of `context` from the head's logits over its draft vocabulary (tokens outside it: q = 0).
  void context_distribution(std::span<const float> draft_logits, int context);

  HeadForwardContext head_;
  KvCache::SeqId seq_;
  KvCache& target_cache_;
  KvCache::SeqId target_seq_;
  DistributionFn distribution_;
  RowControls controls_;
  TreeGrowth growth_;
  int forwards_ = 0;

  // The proposal in progress.
  std::span<const int> committed_;
  int root_position_ = 0;
  int prefix_end_ = 0;                 // head cache length before the tree's entries
  std::optional<SequenceRows> pending_;  // the forward asked for: the catch-up or a feed
  bool catching_up_ = false;
  std::vector<float> taps_;            // [catch-up rows, taps width] the catch-up's taps
  std::vector<float> x_;               // [pending rows, hidden] their input states (the catch-up's once asked for)
  std::optional<DrawOptions> device_options_;
  TreeGrowth::DeviceShape device_shape_;  // the proposal as its device may draw it whole (off: it may not)
  bool drawn_on_device_ = false;       // the proposal was left on the device
  std::vector<double> device_uniforms_;  // [its nodes] where sampled
  PathEdits path_edits_;               // the device chain's controls, where active
  std::vector<float> context_out_;     // [contexts fed, hidden] output state of each context's entry
  // Scratch.
  std::vector<int> tokens_, positions_;
  std::vector<float> row_, edited_;
  std::vector<int> path_;
};

}  // namespace specula
