#include "draft/medusa_drafter.h"

#include <algorithm>

#include "base/error.h"
#include "draft/sibling_draw.h"

namespace specula {

MedusaDrafter::MedusaDrafter(const MedusaBackend& medusa, Workspace& workspace, KvCache& target_cache,
                             KvCache::SeqId target_seq, int target_layers, DistributionFn distribution, bool stochastic,
                             TreeTopology topology, RowControls controls)
    : medusa_(medusa),
      workspace_(workspace),
      target_cache_(target_cache),
      target_seq_(target_seq),
      distribution_(std::move(distribution)),
      controls_(controls),
      stochastic_(stochastic),
      topology_(std::move(topology)),
      topology_children_(topology_.children()) {
  SPECULA_CHECK(topology_.size() > 0, "medusa: empty tree shape");
  SPECULA_CHECK(topology_.depth() <= medusa_.config().num_heads, medusa_.medusa().dir(), ": a tree ",
                topology_.depth(), " deep needs as many Medusa heads; the folder has ", medusa_.config().num_heads);
  const std::span<const int> layers = target_cache_.state_layers();
  const auto it = std::find(layers.begin(), layers.end(), target_layers);
  SPECULA_CHECK(it != layers.end(), "medusa: the target cache does not keep the states of tap layer ", target_layers,
                " (the last layer's output)");
  state_offset_ = static_cast<int>(it - layers.begin()) * medusa_.config().hidden_size;
}

void MedusaDrafter::fill_rows(int context) {
  const std::size_t vocab = static_cast<std::size_t>(medusa_.config().vocab_size);
  const int heads = medusa_.config().num_heads;
  const TokenTree& tree = proposal_.tree;
  for (int c = static_cast<int>(proposal_.q.size() / vocab); c <= context; ++c) {
    const int depth = c == 0 ? 0 : tree.depth[static_cast<std::size_t>(c - 1)];
    proposal_.q.resize(proposal_.q.size() + vocab, 0.0f);
    if (depth >= heads) continue;  // a leaf no head proposes below
    const std::span<float> row = std::span(proposal_.q).last(vocab);
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
  const SiblingDraw mode = !stochastic_ ? SiblingDraw::kTopK
                           : topology_.is_chain() ? SiblingDraw::kSampled
                                                  : SiblingDraw::kWithoutReplacement;
  proposal_ = Proposal{TokenTree(mode), {}};
  if (n < 2) return;  // a one-token prompt's root has no state before it: nothing is proposed
  const std::span<const float> states =
      target_cache_.states(target_seq_, n - 2).subspan(static_cast<std::size_t>(state_offset_),
                                                       static_cast<std::size_t>(c.hidden_size));
  logits_.resize(static_cast<std::size_t>(c.num_heads) * c.vocab_size);
  medusa_.forward(states, 1, workspace_, logits_);
  ++forwards_;
  depth_q_.assign(static_cast<std::size_t>(c.num_heads), {});

  // Level by level: draw each frontier context's children from its depth's q.
  const std::size_t vocab = static_cast<std::size_t>(c.vocab_size);
  TokenTree& tree = proposal_.tree;
  std::vector<std::pair<int, int>> frontier{{0, 0}};  // (context, topology context)
  double confidence = 1;
  const int max_depth = std::min(bound.max_depth, c.num_heads);
  for (int level = 0; level < max_depth && !frontier.empty(); ++level) {
    const int first = tree.size();
    std::vector<std::pair<int, int>> next;
    for (const auto& [context, shape_context] : frontier) {
      const std::vector<int>& shape_children = topology_children_[static_cast<std::size_t>(shape_context)];
      if (shape_children.empty()) continue;
      fill_rows(context);
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
    if (last == first) break;
    if (last == level + 1 && level + 1 < max_depth && confidence < bound.stop_below) {  // a chain the heads doubt
      proposal_.stopped = true;
      break;
    }
  }
  const bool needs_q = std::any_of(tree.draw.begin(), tree.draw.end(), [](SiblingDraw d) { return d != SiblingDraw::kTopK; });
  if (needs_q && tree.size() > 0)
    fill_rows(tree.num_contexts() - 1);
  else
    proposal_.q.clear();
}

}  // namespace specula
