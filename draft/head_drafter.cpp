#include "draft/head_drafter.h"

#include <algorithm>
#include <limits>

#include "base/error.h"

namespace specula {

void feed_head_entries(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache,
                       KvCache::SeqId target_seq, std::span<const int> tokens, std::vector<float>& logits,
                       std::vector<float>& out) {
  const int cached = head.cache.length(seq);
  const int total = static_cast<int>(tokens.size());
  const int rows = total - 1 - cached;  // entries of t_{cached + 1} .. t_{total - 1}
  SPECULA_CHECK(rows >= 1 && target_cache.length(target_seq) >= total - 1, "draft head: the target holds ",
                target_cache.length(target_seq), " of ", total - 1, " tokens; the head ", cached);
  const std::size_t h = static_cast<std::size_t>(head.head.config().hidden_size());
  const std::size_t width = static_cast<std::size_t>(target_cache.state_width());
  std::vector<float> taps(static_cast<std::size_t>(rows) * width), x(static_cast<std::size_t>(rows) * h);
  std::vector<int> entry_tokens(static_cast<std::size_t>(rows)), positions(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const int j = cached + 1 + r;  // the entry's token index
    const std::span<const float> states = target_cache.states(target_seq, j - 1);
    std::copy(states.begin(), states.end(), taps.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * width));
    entry_tokens[static_cast<std::size_t>(r)] = tokens[static_cast<std::size_t>(j)];
    positions[static_cast<std::size_t>(r)] = j;
  }
  head.head.project(taps, x, rows);
  logits.resize(static_cast<std::size_t>(head.head.config().draft_vocab_size));
  out.resize(static_cast<std::size_t>(rows) * h);
  head.run(SequenceRows{seq, entry_tokens, positions, {}, RowLogits::kLast}, x, logits, out);
}

HeadDrafter::HeadDrafter(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache,
                         KvCache::SeqId target_seq, DistributionFn distribution, bool stochastic, TreeShape shape,
                         RowControls controls)
    : head_(head),
      seq_(seq),
      target_cache_(target_cache),
      target_seq_(target_seq),
      distribution_(std::move(distribution)),
      controls_(controls),
      growth_(stochastic, std::move(shape)) {
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

void HeadDrafter::catch_up(std::span<const int> committed) {
  feed_head_entries(head_, seq_, target_cache_, target_seq_, committed, logits_, out_);
  ++forwards_;
  const std::size_t h = static_cast<std::size_t>(hidden());
  context_out_.assign(out_.end() - static_cast<std::ptrdiff_t>(h), out_.end());
  context_distribution(logits_, 0);
}

void HeadDrafter::feed(NodeFeed nodes) {
  const TokenTree& tree = growth_.proposal().tree;
  const std::size_t h = static_cast<std::size_t>(hidden());
  const std::size_t n = static_cast<std::size_t>(nodes.last - nodes.first);
  positions_.resize(n);
  x_.resize(n * h);
  for (int i = nodes.first; i < nodes.last; ++i) {
    const std::size_t r = static_cast<std::size_t>(i - nodes.first);
    positions_[r] = root_position_ + tree.depth[static_cast<std::size_t>(i)];
    const std::size_t parent_context = static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(i)] + 1);
    std::copy_n(&context_out_[parent_context * h], h, &x_[r * h]);
  }
  const std::size_t draft_vocab = static_cast<std::size_t>(head_.head.config().draft_vocab_size);
  logits_.resize(n * draft_vocab);
  out_.resize(n * h);
  head_.run(SequenceRows{seq_, std::span(tree.tokens).subspan(static_cast<std::size_t>(nodes.first), n), positions_,
                         std::span(tree.parent).first(static_cast<std::size_t>(nodes.last)), RowLogits::kAll},
            x_, logits_, out_);
  ++forwards_;
  context_out_.insert(context_out_.end(), out_.begin(), out_.end());
  for (int i = nodes.first; i < nodes.last; ++i)
    context_distribution(std::span<const float>(logits_).subspan(static_cast<std::size_t>(i - nodes.first) * draft_vocab, draft_vocab),
                         i + 1);
}

void HeadDrafter::start(std::span<const int> committed, DraftBound bound, Philox& rng) {
  committed_ = committed;
  root_position_ = static_cast<int>(committed.size()) - 1;
  growth_.begin(bound, rng);
  if (committed.size() < 2) {  // no state before the root: nothing to draft from
    prefix_end_ = head_.cache.length(seq_);
    return;
  }
  catch_up(committed);
  prefix_end_ = head_.cache.length(seq_);
  const int vocab = head_.target.vocab_size;
  growth_.root_ready(vocab);
  while (growth_.pending()) {
    const NodeFeed nodes = *growth_.pending();
    feed(nodes);
    growth_.fed(nodes, vocab);
  }
}

void HeadDrafter::accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int>) {
  head_.cache.truncate(seq_, prefix_end_);
  growth_.accepted(tree.size(), static_cast<int>(accepted_nodes.size()));
}

}  // namespace specula
