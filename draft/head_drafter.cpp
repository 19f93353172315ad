#include "draft/head_drafter.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "draft/sibling_draw.h"

namespace specula {

HeadDrafter::HeadDrafter(const HeadForwardContext& head, KvCache::SeqId seq, KvCache& target_cache,
                         KvCache::SeqId target_seq, DistributionFn distribution, bool stochastic, TreeTopology topology,
                         RowControls controls)
    : head_(head),
      seq_(seq),
      target_cache_(target_cache),
      target_seq_(target_seq),
      distribution_(std::move(distribution)),
      controls_(controls),
      stochastic_(stochastic),
      topology_(std::move(topology)),
      topology_children_(topology_.children()) {
  SPECULA_CHECK(topology_.size() > 0, "draft head: empty tree shape");
  const std::vector<int>& taps = head_.head.head().config().tap_layers;
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
  if (controls_.active()) proposal_.tree.path_tokens(context, path_);
  proposal_.q.resize(proposal_.q.size() + vocab);
  distribution_(controls_.edited(row_, committed_, path_, edited_), std::span(proposal_.q).last(vocab));
}

void HeadDrafter::catch_up(std::span<const int> committed) {
  const int cached = head_.cache.length(seq_);
  const int total = static_cast<int>(committed.size());
  const int rows = total - 1 - cached;  // entries of t_{cached + 1} .. t_{total - 1}
  SPECULA_CHECK(rows >= 1 && target_cache_.length(target_seq_) >= total - 1,
                "draft head: the target holds ", target_cache_.length(target_seq_), " of ", total - 1,
                " committed tokens; the head ", cached);
  const std::size_t h = static_cast<std::size_t>(hidden());
  const std::size_t width = static_cast<std::size_t>(target_cache_.state_width());
  taps_.resize(static_cast<std::size_t>(rows) * width);
  tokens_.resize(static_cast<std::size_t>(rows));
  positions_.resize(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const int j = cached + 1 + r;  // the entry's token index
    const std::span<const float> states = target_cache_.states(target_seq_, j - 1);
    std::copy(states.begin(), states.end(), taps_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * width));
    tokens_[static_cast<std::size_t>(r)] = committed[static_cast<std::size_t>(j)];
    positions_[static_cast<std::size_t>(r)] = j;
  }
  x_.resize(static_cast<std::size_t>(rows) * h);
  head_.head.project(taps_, x_, rows);
  logits_.resize(static_cast<std::size_t>(head_.head.head().config().draft_vocab_size));
  out_.resize(static_cast<std::size_t>(rows) * h);
  head_.run(SequenceRows{seq_, tokens_, positions_, {}, RowLogits::kLast}, x_, logits_, out_);
  ++forwards_;
  context_out_.assign(out_.end() - static_cast<std::ptrdiff_t>(h), out_.end());
  context_distribution(logits_, 0);
}

void HeadDrafter::feed(int first, int last) {
  const TokenTree& tree = proposal_.tree;
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
  const std::size_t draft_vocab = static_cast<std::size_t>(head_.head.head().config().draft_vocab_size);
  logits_.resize(n * draft_vocab);
  out_.resize(n * h);
  head_.run(SequenceRows{seq_, std::span(tree.tokens).subspan(static_cast<std::size_t>(first), n), positions_,
                         std::span(tree.parent).first(static_cast<std::size_t>(last)), RowLogits::kAll},
            x_, logits_, out_);
  ++forwards_;
  context_out_.insert(context_out_.end(), out_.begin(), out_.end());
  for (int i = first; i < last; ++i)
    context_distribution(std::span<const float>(logits_).subspan(static_cast<std::size_t>(i - first) * draft_vocab, draft_vocab),
                         i + 1);
}

void HeadDrafter::start(std::span<const int> committed, DraftBound bound, Philox& rng) {
  committed_ = committed;
  root_position_ = static_cast<int>(committed.size()) - 1;
  const SiblingDraw mode = !stochastic_ ? SiblingDraw::kTopK
                           : topology_.is_chain() ? SiblingDraw::kSampled
                                                  : SiblingDraw::kWithoutReplacement;
  proposal_ = Proposal{TokenTree(mode), {}};
  catch_up(committed);
  prefix_end_ = head_.cache.length(seq_);

  // Level by level: draw each frontier context's children, feed them unless they are the last level.
  const std::size_t vocab = static_cast<std::size_t>(head_.target.vocab_size);
  TokenTree& tree = proposal_.tree;
  std::vector<std::pair<int, int>> frontier{{0, 0}};  // (context, topology context)
  double confidence = 1;
  for (int level = 0; level < bound.max_depth && !frontier.empty(); ++level) {
    const int first = tree.size();
    std::vector<std::pair<int, int>> next;
    for (const auto& [context, shape_context] : frontier) {
      const std::vector<int>& shape_children = topology_children_[static_cast<std::size_t>(shape_context)];
      if (shape_children.empty()) continue;
      const auto q_row = std::span<const float>(proposal_.q).subspan(static_cast<std::size_t>(context) * vocab, vocab);
      const std::vector<int> drawn =
          draw_siblings(q_row, static_cast<int>(shape_children.size()), tree.draw[static_cast<std::size_t>(context)], rng);
      for (std::size_t rank = 0; rank < drawn.size(); ++rank) {
        const int node = tree.add_node(context - 1, drawn[rank]);
        confidence *= q_row[static_cast<std::size_t>(drawn[rank])];
        next.emplace_back(node + 1, shape_children[rank] + 1);
      }
    }
    const int last = tree.size();
    frontier = std::move(next);
    const bool grows = std::any_of(frontier.begin(), frontier.end(), [&](const auto& f) {
      return !topology_children_[static_cast<std::size_t>(f.second)].empty();
    });
    if (level + 1 == bound.max_depth || last == first || !grows) break;
    if (last == level + 1 && confidence < bound.stop_below) {  // a chain the head doubts
      proposal_.stopped = true;
      break;
    }
    feed(first, last);
  }
  const bool needs_q = std::any_of(tree.draw.begin(), tree.draw.end(), [](SiblingDraw d) { return d != SiblingDraw::kTopK; });
  if (needs_q && tree.size() > 0)
    proposal_.q.resize(static_cast<std::size_t>(tree.num_contexts()) * vocab, 0.0f);  // unfed leaves
  else
    proposal_.q.clear();
}

void HeadDrafter::accept(const TokenTree&, std::span<const int>, std::span<const int>) {
  head_.cache.truncate(seq_, prefix_end_);
}

}  // namespace specula
