#include "draft/medusa_drafter.h"

#include <algorithm>

#include "base/error.h"

namespace specula {

MedusaDrafter::MedusaDrafter(const MedusaBackend& medusa, Workspace& workspace, KvCache& target_cache,
                             KvCache::SeqId target_seq, int target_layers, DistributionFn distribution, bool stochastic,
                             TreeShape shape, RowControls controls, std::optional<DrawOptions> device)
    : medusa_(medusa),
      workspace_(workspace),
      target_cache_(target_cache),
      target_seq_(target_seq),
      distribution_(std::move(distribution)),
      controls_(controls),
      growth_(stochastic, shape),
      device_options_(device) {
  SPECULA_CHECK(!device || device->greedy() == !stochastic, "medusa: device draws ",
                device && device->greedy() ? "greedy" : "sampled", " for a ", stochastic ? "sampled" : "greedy",
                " drafter");
  SPECULA_CHECK(shape.topology.depth() <= medusa_.config().num_heads, medusa_.medusa().dir(), ": a tree ",
                shape.topology.depth(), " deep needs as many Medusa heads; the folder has ",
                medusa_.config().num_heads);
  shape_depth_ = shape.topology.depth();
  const std::span<const int> layers = target_cache_.state_layers();
  const auto it = std::find(layers.begin(), layers.end(), target_layers);
  SPECULA_CHECK(it != layers.end(), "medusa: the target cache does not keep the states of tap layer ", target_layers,
                " (the last layer's output)");
  state_offset_ = static_cast<int>(it - layers.begin()) * medusa_.config().hidden_size;
}

void MedusaDrafter::fill_rows(int context) {
  const std::size_t vocab = static_cast<std::size_t>(medusa_.config().vocab_size);
  const int heads = heads_;
  Proposal& proposal = growth_.proposal();
  const TokenTree& tree = proposal.tree;
  for (int c = static_cast<int>(proposal.q.size() / vocab); c <= context; ++c) {
    const int depth = c == 0 ? 0 : tree.depth[static_cast<std::size_t>(c - 1)];
    proposal.q.resize(proposal.q.size() + vocab, 0.0f);
    if (depth >= heads) continue;  // a leaf no head proposes below
    const std::span<float> row = std::span(proposal.q).last(vocab);
    const std::span<const float> logits = std::span<const float>(logits_).subspan(static_cast<std::size_t>(depth) * vocab, vocab);
    if (controls_.active()) {
      tree.path_tokens(c, path_);
      distribution_(controls_.edited(logits, committed_, path_, edited_), row);
      continue;
    }
    std::vector<float>& q = depth_q_[static_cast<std::size_t>(depth)];
    if (q.empty()) {
      q.resize(vocab);
      distribution_(logits, q);
    }
    std::copy(q.begin(), q.end(), row.begin());
  }
}

void MedusaDrafter::start(std::span<const int> committed, DraftBound bound, Philox& rng) {
  const MedusaConfig& c = medusa_.config();
  const int n = static_cast<int>(committed.size());
  SPECULA_CHECK(target_cache_.length(target_seq_) >= n - 1, "medusa: the target holds ",
                target_cache_.length(target_seq_), " of ", n - 1, " committed tokens");
  committed_ = committed;
  pending_ = {};
  device_shape_ = {};
  drawn_on_device_ = false;
  DraftBound within = bound;
  within.max_depth = std::min(bound.max_depth, c.num_heads);
  growth_.begin(within, rng);
  if (n < 2) return;  // a one-token prompt's root has no state before it: nothing is proposed
  // The heads of the depths the proposal can feed: a context at the last depth is a leaf.
  heads_ = std::min(within.max_depth, shape_depth_);
  if (heads_ == 0) return;
  const std::span<const float> state =
      target_cache_.states(target_seq_, n - 2).subspan(static_cast<std::size_t>(state_offset_),
                                                       static_cast<std::size_t>(c.hidden_size));
  state_.assign(state.begin(), state.end());
  pending_ = MedusaRows{&medusa_, &workspace_, state_, heads_};
  if (!device_options_ || controls_.active() || !medusa_.drafts_on_device()) return;
  device_shape_ = growth_.device_shape();
  // Every context needs a head: a static tree lies within the shape and the bound (heads_ deep),
  // an adaptive chain may outgrow them.
  if (device_shape_.dynamic.on() || device_shape_.forwards > heads_) device_shape_ = {};
  pending_.device = device_shape_.on();
}

MedusaTree MedusaDrafter::medusa_device_tree() {
  SPECULA_CHECK(pending_.device, "medusa: a device tree asked of a proposal the device cannot draw");
  pending_.device = false;  // its uniforms are drawn once
  growth_.device_uniforms(device_shape_, device_uniforms_);
  return MedusaTree{device_shape_.nodes, device_shape_.draw_options(*device_options_), device_shape_.parents,
                    device_shape_.mode, device_uniforms_};
}

void MedusaDrafter::chain_left_on_device(std::shared_ptr<const DeviceDraws> draws, std::span<const int> node_draws) {
  SPECULA_CHECK(pending_.backend && static_cast<int>(node_draws.size()) == device_shape_.nodes,
                "medusa: device draws given without a pending device tree, or not ", device_shape_.nodes, " of them");
  pending_ = {};
  ++forwards_;
  drawn_on_device_ = true;
  growth_.device_left(device_shape_, std::move(draws), node_draws);
}

void MedusaDrafter::medusa_done(std::span<const float> logits) {
  const MedusaConfig& c = medusa_.config();
  SPECULA_CHECK(pending_.backend && logits.size() == static_cast<std::size_t>(heads_) * c.vocab_size,
                "medusa: heads logits given without a pending forward, or not [", heads_, ", ", c.vocab_size, "]");
  pending_ = {};
  logits_.assign(logits.begin(), logits.end());
  ++forwards_;
  depth_q_.assign(static_cast<std::size_t>(heads_), {});

  fill_rows(0);
  growth_.root_ready(c.vocab_size);
  while (growth_.pending()) {
    const NodeFeed nodes = *growth_.pending();
    fill_rows(nodes.last);
    growth_.fed(nodes, c.vocab_size);
  }
}

Proposal MedusaDrafter::take_proposal() {
  SPECULA_CHECK(!pending_.backend, "medusa: the proposal's heads forward has not run (run_draft_forwards)");
  return growth_.take(medusa_.config().vocab_size);
}

}  // namespace specula
