#include "draft/head_drafter.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "base/error.h"

namespace specula {

void head_entry_taps(int cached, KvCache& target_cache, KvCache::SeqId target_seq,
                     std::span<const int> tokens, std::vector<float>& taps, std::vector<int>& entry_tokens,
                     std::vector<int>& positions) {
  const int total = static_cast<int>(tokens.size());
  const int rows = total - 1 - cached;  // entries of t_{cached + 1} .. t_{total - 1}
  SPECULA_CHECK(rows >= 1 && target_cache.length(target_seq) >= total - 1, "draft head: the target holds ",
                target_cache.length(target_seq), " of ", total - 1, " tokens; the head ", cached);
  const std::size_t width = static_cast<std::size_t>(target_cache.state_width());
  taps.resize(static_cast<std::size_t>(rows) * width);
  entry_tokens.resize(static_cast<std::size_t>(rows));
  positions.resize(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const int j = cached + 1 + r;  // the entry's token index
    const std::span<const float> states = target_cache.states(target_seq, j - 1);
    std::copy(states.begin(), states.end(), taps.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * width));
    entry_tokens[static_cast<std::size_t>(r)] = tokens[static_cast<std::size_t>(j)];
    positions[static_cast<std::size_t>(r)] = j;
  }
}

void feed_head_entries(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache,
                       KvCache::SeqId target_seq, std::span<const int> tokens, std::vector<float>& logits,
                       std::vector<float>& out) {
  std::vector<float> taps;
  std::vector<int> entry_tokens, positions;
  head_entry_taps(head.cache.length(seq), target_cache, target_seq, tokens, taps, entry_tokens, positions);
  std::vector<float> x(entry_tokens.size() * static_cast<std::size_t>(head.head.config().hidden_size()));
  head.head.project(taps, x, static_cast<int>(entry_tokens.size()), head.workspace);
  logits.resize(static_cast<std::size_t>(head.head.config().draft_vocab_size));
  out.resize(x.size());
  head.run(SequenceRows{seq, entry_tokens, positions, {}, RowLogits::kLast}, x, logits, out);
}

HeadDrafter::HeadDrafter(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache,
                         KvCache::SeqId target_seq, DistributionFn distribution, bool stochastic, TreeShape shape,
                         RowControls controls, std::optional<DrawOptions> device)
    : head_(head),
      seq_(seq),
      target_cache_(target_cache),
      target_seq_(target_seq),
      distribution_(std::move(distribution)),
      controls_(controls),
      growth_(stochastic, std::move(shape)),
      device_options_(device) {
  SPECULA_CHECK(!device || device->greedy() == !stochastic, "draft head: device draws ",
                device && device->greedy() ? "greedy" : "sampled", " for a ", stochastic ? "sampled" : "greedy",
                " drafter");
  const std::vector<int>& taps = head_.head.config().tap_layers;
  SPECULA_CHECK(std::equal(taps.begin(), taps.end(), target_cache_.state_layers().begin(),
                           target_cache_.state_layers().end()),
                "draft head: the target cache does not keep the states of the head's tap layers");
}

HeadDrafter::~HeadDrafter() { head_.cache.free(seq_); }

void HeadDrafter::context_distribution(std::span<const float> draft_logits, int context) {
  const std::vector<int>& to_target = head_.head.head().draft_to_target();
  const std::size_t vocab = static_cast<std::size_t>(head_.target.vocab_size);
  row_.assign(vocab, -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < to_target.size(); ++i) row_[static_cast<std::size_t>(to_target[i])] = draft_logits[i];
  Proposal& proposal = growth_.proposal();
  if (controls_.active()) proposal.tree.path_tokens(context, path_);
  proposal.q.resize(proposal.q.size() + vocab);
  distribution_(controls_.edited(row_, committed_, path_, edited_), std::span(proposal.q).last(vocab));
}

void HeadDrafter::request_feed() {
  if (!growth_.pending()) {
    pending_.reset();
    return;
  }
  const auto [first, last] = *growth_.pending();
  const TokenTree& tree = growth_.proposal().tree;
  const std::size_t h = static_cast<std::size_t>(hidden());
  const std::size_t n = static_cast<std::size_t>(last - first);
  positions_.resize(n);
  x_.resize(n * h);
  for (int i = first; i < last; ++i) {
    const std::size_t r = static_cast<std::size_t>(i - first);
    positions_[r] = root_position_ + tree.depth[static_cast<std::size_t>(i)];
    const std::size_t parent_context = static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(i)] + 1);
    std::copy_n(&context_out_[parent_context * h], h, &x_[r * h]);
  }
  pending_ = SequenceRows{seq_, std::span(tree.tokens).subspan(static_cast<std::size_t>(first), n), positions_,
                          std::span(tree.parent).first(static_cast<std::size_t>(last)), RowLogits::kAll};
}

void HeadDrafter::head_forward_done(std::span<const float> logits, std::span<const float> out) {
  pending_.reset();
  ++forwards_;
  const std::size_t h = static_cast<std::size_t>(hidden());
  const int vocab = head_.target.vocab_size;
  if (catching_up_) {  // the root's entry is the last: its output state and q are context 0's
    catching_up_ = false;
    context_out_.assign(out.end() - static_cast<std::ptrdiff_t>(h), out.end());
    context_distribution(logits, 0);
    growth_.root_ready(vocab);
    return request_feed();
  }
  const NodeFeed feed = *growth_.pending();
  const std::size_t draft_vocab = static_cast<std::size_t>(head_.head.config().draft_vocab_size);
  context_out_.insert(context_out_.end(), out.begin(), out.end());
  for (int i = feed.first; i < feed.last; ++i)
    context_distribution(logits.subspan(static_cast<std::size_t>(i - feed.first) * draft_vocab, draft_vocab), i + 1);
  growth_.fed(feed, vocab);
  request_feed();
}

void HeadDrafter::start(std::span<const int> committed, DraftBound bound, Philox& rng) {
  committed_ = committed;
  root_position_ = static_cast<int>(committed.size()) - 1;
  growth_.begin(bound, rng);
  pending_.reset();
  device_shape_ = {};
  drawn_on_device_ = false;
  if (committed.size() < 2) {  // no state before the root: nothing to draft from
    prefix_end_ = head_.cache.length(seq_);
    return;
  }
  // The catch-up: the entries the head's cache lacks, the root's last (their input states
  // projected once a host forward asks for them).
  head_entry_taps(head_.cache.length(seq_), target_cache_, target_seq_, committed, taps_, tokens_, positions_);
  x_.clear();
  prefix_end_ = root_position_;
  pending_ = SequenceRows{seq_, tokens_, positions_, {}, RowLogits::kLast};
  catching_up_ = true;
  if (!device_options_ || !controls_.paths_on_device() || !head_.head.drafts_on_device()) return;
  device_shape_ = growth_.device_shape();
  if (controls_.active() && device_shape_.dynamic.on()) device_shape_ = {};
}

std::span<const float> HeadDrafter::pending_states() {
  if (catching_up_ && x_.empty()) {
    x_.resize(tokens_.size() * static_cast<std::size_t>(hidden()));
    head_.head.project(taps_, x_, static_cast<int>(tokens_.size()), head_.workspace);
  }
  return x_;
}

HeadChain HeadDrafter::head_device_chain() {
  SPECULA_CHECK(head_device_shape(), "draft head: the proposal is not one its device draws");
  growth_.device_uniforms(device_shape_, device_uniforms_);
  HeadChain out{device_shape_.chain(*pending_, *device_options_, device_uniforms_), taps_};
  if (controls_.active()) {
    controls_.path_edits(committed_, head_.target.vocab_size, path_edits_);
    out.chain.controls = &path_edits_;
  }
  return out;
}

void HeadDrafter::chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws) {
  assert(head_device_shape() && static_cast<int>(node_draws.size()) == device_shape_.nodes);
  growth_.device_left(device_shape_, std::move(draws), node_draws);
  forwards_ += device_shape_.forwards;
  pending_.reset();
  catching_up_ = false;
  device_shape_ = {};
  drawn_on_device_ = true;
}

void HeadDrafter::accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int>) {
  head_.cache.truncate(seq_, prefix_end_);
  growth_.accepted(tree.size(), static_cast<int>(accepted_nodes.size()));
}

}  // namespace specula
