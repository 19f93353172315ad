#include "draft/model_drafter.h"

#include <cassert>

#include "base/error.h"

namespace specula {

ModelDrafter::ModelDrafter(const ForwardContext& draft, KvCache::SeqId seq, DistributionFn distribution,
                           bool stochastic, TreeShape shape, RowControls controls, std::optional<DrawOptions> device)
    : draft_(draft),
      seq_(seq),
      distribution_(std::move(distribution)),
      controls_(controls),
      growth_(stochastic, std::move(shape)),
      device_options_(device) {
  SPECULA_CHECK(!device || device->greedy() == !stochastic, "draft: device draws ",
                device && device->greedy() ? "greedy" : "sampled", " for a ", stochastic ? "sampled" : "greedy",
                " drafter");
}

ModelDrafter::~ModelDrafter() { draft_.cache.free(seq_); }

void ModelDrafter::start(std::span<const int> committed, DraftBound bound, Philox& rng) {
  const int cached = draft_.cache.length(seq_);
  const int total = static_cast<int>(committed.size());
  assert(cached < total);
  committed_ = committed;
  root_position_ = total - 1;
  prefix_end_ = total;
  growth_.begin(bound, rng);

  // Catch up: every committed token not yet in the draft cache (the root at least).
  pending_positions_.resize(static_cast<std::size_t>(total - cached));
  for (int i = cached; i < total; ++i) pending_positions_[static_cast<std::size_t>(i - cached)] = i;
  pending_ = SequenceRows{seq_, committed.subspan(static_cast<std::size_t>(cached)), pending_positions_, {},
                          RowLogits::kLast};
  catching_up_ = true;

  device_chain_.reset();
  device_nodes_.clear();
  drawn_on_device_ = false;
  if (!device_options_ || !controls_.paths_on_device() || !draft_.backend.drafts_on_device() ||
      draft_.cache.state_width() != 0)
    return;
  device_shape_ = growth_.device_shape();
  if (!device_shape_.on() || (controls_.active() && device_shape_.dynamic.on())) return;
  growth_.device_uniforms(device_shape_, device_uniforms_);
  device_chain_ = device_shape_.chain(*pending_, *device_options_, device_uniforms_);
  if (!controls_.active()) return;
  controls_.path_edits(committed, vocab(), path_edits_);
  device_chain_->controls = &path_edits_;
}

void ModelDrafter::chain_drawn(std::span<const int> tokens, std::span<const int> parents, std::span<const float> q) {
  assert(device_chain_ && static_cast<int>(tokens.size()) == device_shape_.nodes);
  device_nodes_ = growth_.device_drawn(device_shape_, tokens, parents, q, vocab());
  end_device_chain();
}

void ModelDrafter::chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws) {
  assert(device_chain_ && static_cast<int>(node_draws.size()) == device_shape_.nodes);
  device_nodes_ = growth_.device_left(device_shape_, std::move(draws), node_draws);
  end_device_chain();
}

void ModelDrafter::end_device_chain() {
  forwards_ += device_shape_.forwards;
  drawn_on_device_ = true;
  device_chain_.reset();
  pending_.reset();
  catching_up_ = false;
}

void ModelDrafter::request_feed() {
  if (!growth_.pending()) return;
  const auto [first, last] = *growth_.pending();
  const TokenTree& tree = growth_.proposal().tree;
  pending_positions_.resize(static_cast<std::size_t>(last - first));
  for (int i = first; i < last; ++i)
    pending_positions_[static_cast<std::size_t>(i - first)] = root_position_ + tree.depth[static_cast<std::size_t>(i)];
  pending_ = SequenceRows{seq_, std::span(tree.tokens).subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(last - first)),
                          pending_positions_, std::span(tree.parent).first(static_cast<std::size_t>(last)),
                          RowLogits::kAll};
}

void ModelDrafter::context_distribution(std::span<const float> logits, int context) {
  Proposal& proposal = growth_.proposal();
  if (controls_.active()) proposal.tree.path_tokens(context, path_);
  const std::size_t v = static_cast<std::size_t>(vocab());
  proposal.q.resize(proposal.q.size() + v);
  distribution_(controls_.edited(logits, committed_, path_, edited_), std::span(proposal.q).last(v));
}

void ModelDrafter::forward_done(std::span<const float> logits) {
  assert(pending_);
  pending_.reset();
  ++forwards_;
  const std::size_t v = static_cast<std::size_t>(vocab());
  if (catching_up_) {
    catching_up_ = false;
    context_distribution(logits.first(v), 0);
    growth_.root_ready(vocab());
    return request_feed();
  }
  // A feed: one q row per fed node, in node order.
  const NodeFeed feed = *growth_.pending();
  for (int i = 0; i < feed.last - feed.first; ++i)
    context_distribution(logits.subspan(static_cast<std::size_t>(i) * v, v), feed.first + i + 1);
  growth_.fed(feed, vocab());
  request_feed();
}

Proposal ModelDrafter::take_proposal() {
  assert(!pending_);
  return growth_.take(vocab());
}

void ModelDrafter::accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int>) {
  std::vector<int> fed_path;  // the accepted nodes' rows in the draft cache
  for (int node : accepted_nodes)
    if (node < growth_.fed_nodes())
      fed_path.push_back(device_nodes_.empty() ? node : device_nodes_[static_cast<std::size_t>(node)]);
  draft_.cache.commit(seq_, prefix_end_, fed_path);
  growth_.accepted(tree.size(), static_cast<int>(accepted_nodes.size()));
}

}  // namespace specula
