#include "draft/tree_growth.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "draft/sibling_draw.h"

namespace specula {
namespace {

// How the children of every context are drawn, given the proposer's configuration.
SiblingDraw mode_of(bool stochastic, const TreeShape& shape) {
  if (!stochastic || shape.dynamic_budget > 0) return SiblingDraw::kTopK;
  return shape.topology.is_chain() ? SiblingDraw::kSampled : SiblingDraw::kWithoutReplacement;
}

}  // namespace

TreeGrowth::TreeGrowth(bool stochastic, TreeShape shape)
    : stochastic_(stochastic),
      shape_(std::move(shape)),
      gamma_(shape_.topology.depth()),
      topology_children_(shape_.topology.children()) {
  SPECULA_CHECK(shape_.dynamic_budget > 0 || shape_.topology.size() > 0, "draft: empty tree shape");
}

void TreeGrowth::begin(DraftBound bound, Philox& rng) {
  rng_ = &rng;
  max_depth_ = bound.max_depth;
  stop_below_ = bound.stop_below;
  siblings_ = bound.siblings;
  max_nodes_ = bound.max_nodes;
  confidence_ = 1;
  fed_nodes_ = 0;
  pending_.reset();
  proposal_ = Proposal();
  proposal_.tree = TokenTree(draw_mode());
}

void TreeGrowth::root_ready(int vocab) {
  if (max_depth_ <= 0) return;
  if (shape_.dynamic_budget > 0) {
    candidates_ = {};
    node_score_.clear();
    pushed_ = 0;
    push_children(0, 0.0, vocab);
    advance_dynamic();
    return;
  }
  if (shape_.adaptive) topology_children_ = chain_topology(gamma_).children();
  level_ = 0;
  frontier_.assign(1, {0, 0});
  advance_static(vocab);
}

void TreeGrowth::fed(NodeFeed feed, int vocab) {
  assert(pending_ && pending_->first == feed.first && pending_->last == feed.last);
  pending_.reset();
  fed_nodes_ = feed.last;
  if (shape_.dynamic_budget == 0) return advance_static(vocab);
  for (int node = feed.first; node < feed.last; ++node)
    if (proposal_.tree.depth[static_cast<std::size_t>(node)] < max_depth_)
      push_children(node + 1, node_score_[static_cast<std::size_t>(node)], vocab);
  advance_dynamic();
}

void TreeGrowth::advance_static(int vocab) {
  const std::size_t v = static_cast<std::size_t>(vocab);
  TokenTree& tree = proposal_.tree;
  while (level_ < max_depth_ && !frontier_.empty()) {
    const int first = tree.size();
    std::vector<std::pair<int, int>> next;
    for (const auto& [context, shape_context] : frontier_) {
      const std::vector<int>& shape_children = topology_children_[static_cast<std::size_t>(shape_context)];
      if (shape_children.empty()) continue;
      const auto q_row = std::span<const float>(proposal_.q).subspan(static_cast<std::size_t>(context) * v, v);
      const int k = static_cast<int>(shape_children.size());
      const std::vector<int> drawn = draw_siblings(q_row, k, tree.draw[static_cast<std::size_t>(context)], *rng_);
      for (std::size_t rank = 0; rank < drawn.size(); ++rank) {
        const int node = tree.add_node(context - 1, drawn[rank]);
        confidence_ *= q_row[static_cast<std::size_t>(drawn[rank])];
        next.emplace_back(node + 1, shape_children[rank] + 1);
      }
    }
    const int last = tree.size();
    frontier_ = std::move(next);
    ++level_;
    // Leaves of the topology need no draft forward: a level of leaves ends the tree.
    const bool grows = std::any_of(frontier_.begin(), frontier_.end(), [&](const auto& f) {
      return !topology_children_[static_cast<std::size_t>(f.second)].empty();
    });
    if (level_ == max_depth_ || last == first || !grows) break;
    // A chain (one node a level so far) whose draft doubts it stops here.
    if (last == level_ && confidence_ < stop_below_) {
      proposal_.stopped = true;
      break;
    }
    pending_ = NodeFeed{first, last};
    return;
  }
  add_siblings(vocab);
}

void TreeGrowth::add_siblings(int vocab) {
  TokenTree& tree = proposal_.tree;
  const int chain = tree.size();  // one node a level: a chain
  const int wanted = wanted_siblings(chain);
  if (chain != static_cast<int>(level_) || chain == 0 || wanted <= 0) return;
  // x_1 was drawn from q (sampled) or is its most probable token (greedy): the others are the
  // next draws without replacement, or the next most probable.
  const auto root_q = std::span<const float>(proposal_.q).first(static_cast<std::size_t>(vocab));
  const SiblingDraw mode = stochastic_ ? SiblingDraw::kWithoutReplacement : SiblingDraw::kTopK;
  const std::vector<int> others = draw_siblings(root_q, wanted, mode, *rng_, tree.tokens.front());
  if (stochastic_ && !others.empty()) tree.draw.front() = SiblingDraw::kWithoutReplacement;
  for (int x : others) tree.add_node(-1, x);
  proposal_.siblings = static_cast<int>(others.size());
}

void TreeGrowth::push_children(int context, double base, int vocab) {
  const std::size_t v = static_cast<std::size_t>(vocab);
  const auto q_row = std::span<const float>(proposal_.q).subspan(static_cast<std::size_t>(context) * v, v);
  Philox unused(0);  // kTopK draws read no random numbers
  for (int token : draw_siblings(q_row, shape_.dynamic_top_k, SiblingDraw::kTopK, unused))
    candidates_.push({base + std::log(double(q_row[static_cast<std::size_t>(token)])), pushed_++, context - 1, token});
}

void TreeGrowth::advance_dynamic() {
  TokenTree& tree = proposal_.tree;
  while (tree.size() < shape_.dynamic_budget && !candidates_.empty()) {
    const int first = tree.size();
    while (tree.size() < shape_.dynamic_budget && tree.size() - first < shape_.dynamic_width && !candidates_.empty()) {
      const Candidate best = candidates_.top();
      candidates_.pop();
      tree.add_node(best.parent, best.token);
      node_score_.push_back(best.score);
    }
    const int last = tree.size();
    if (tree.size() >= shape_.dynamic_budget) break;
    const bool expandable = std::any_of(tree.depth.begin() + first, tree.depth.end(), [&](int d) { return d < max_depth_; });
    if (!expandable) continue;  // leaves at max_depth need no draft forward
    pending_ = NodeFeed{fed_nodes_, last};  // fed nodes stay a prefix of node order
    return;
  }
}

int TreeGrowth::wanted_siblings(int chain) const {
  return std::max(0, max_nodes_ > 0 ? std::min(siblings_, max_nodes_ - chain) : siblings_);
}

SiblingDraw TreeGrowth::draw_mode() const { return mode_of(stochastic_, shape_); }

namespace {

// Each node's depth (1: a root child) of a tree whose parents precede their children.
std::vector<int> depths(std::span<const int> parents) {
  std::vector<int> depth(parents.size());
  for (std::size_t i = 0; i < parents.size(); ++i)
    depth[i] = parents[i] < 0 ? 1 : depth[static_cast<std::size_t>(parents[i])] + 1;
  return depth;
}

}  // namespace

TreeGrowth::DeviceShape TreeGrowth::device_shape() const {
  DeviceShape out;
  if (max_depth_ <= 0) return out;
  if (shape_.dynamic_budget > 0) {
    const int budget = shape_.dynamic_budget, width = shape_.dynamic_width;
    if (width <= 0 || shape_.dynamic_top_k <= 0 || dynamic_rounds(budget, width) - 1 >= max_depth_) return out;
    out.dynamic = DynamicDraft{budget, width, shape_.dynamic_top_k};
    out.nodes = budget;
    out.forwards = dynamic_rounds(budget, width);
    out.fed = (out.forwards - 1) * width;
  } else if (stop_below_ > 0) {
    return out;
  } else if (shape_.adaptive || shape_.topology.is_chain()) {
    const int length = std::min(max_depth_, gamma_);
    out.siblings = wanted_siblings(length);
    out.nodes = length + out.siblings;
    out.forwards = length;
    out.fed = length - 1;
    out.mode = stochastic_ ? kDrawSampled : kDrawTopK;
    if (out.siblings > 0) {
      // Growth order [x_1, siblings..., x_2, ..., x_length]; proposal order the chain first.
      out.mode = stochastic_ ? kDrawWithoutReplacement : kDrawTopK;
      out.parents.assign(static_cast<std::size_t>(1 + out.siblings), -1);
      for (int d = 2; d <= length; ++d) out.parents.push_back(d == 2 ? 0 : out.siblings + d - 2);
    }
  } else if (siblings_ > 0) {
    return out;
  } else {
    // advance_static's levels with every child drawn: (node, topology context) per frontier entry.
    std::vector<std::pair<int, int>> frontier{{-1, 0}};
    for (int level = 0; level < max_depth_ && !frontier.empty(); ++level) {
      std::vector<std::pair<int, int>> next;
      for (const auto& [node, shape_context] : frontier)
        for (const int child : topology_children_[static_cast<std::size_t>(shape_context)]) {
          next.emplace_back(static_cast<int>(out.parents.size()), child + 1);
          out.parents.push_back(node);
        }
      frontier = std::move(next);
    }
    out.nodes = static_cast<int>(out.parents.size());
    out.mode = static_cast<int>(draw_mode());
  }
  if (out.is_tree()) {  // a round a level; the levels above the deepest are fed
    const std::vector<int> depth = depths(out.parents);
    out.forwards = *std::max_element(depth.begin(), depth.end());
    out.fed = static_cast<int>(std::count_if(depth.begin(), depth.end(), [&](int d) { return d < out.forwards; }));
  }
  out.order.resize(static_cast<std::size_t>(out.nodes));
  std::iota(out.order.begin(), out.order.end(), 0);
  if (out.siblings > 0) {  // the chain's nodes after x_1, then the siblings
    const int length = out.forwards;
    for (int d = 1; d < length; ++d) out.order[static_cast<std::size_t>(d)] = out.siblings + d;
    for (int j = 1; j <= out.siblings; ++j) out.order[static_cast<std::size_t>(length - 1 + j)] = j;
  }
  out.held_parents = out.parents;
  if (!out.is_tree()) {
    out.held_parents.resize(static_cast<std::size_t>(out.nodes));
    std::iota(out.held_parents.begin(), out.held_parents.end(), -1);
  }
  return out;
}

void TreeGrowth::device_uniforms(const DeviceShape& shape, std::vector<double>& uniforms) {
  uniforms.clear();
  if (!shape.sampled()) return;
  uniforms.resize(static_cast<std::size_t>(shape.nodes));
  for (const int node : shape.order) uniforms[static_cast<std::size_t>(node)] = rng_->uniform();
}

std::vector<int> TreeGrowth::complete_tree(const DeviceShape& shape, std::span<const int> parents,
                                           std::span<const int> tokens) {
  assert(proposal_.tree.size() == 0 && parents.size() == tokens.size() && shape.order.size() == tokens.size());
  const std::size_t n = tokens.size();
  const std::vector<int> depth = depths(parents);
  std::vector<int> kept, compact(n, -1);
  for (const int node : shape.order) {
    const std::size_t i = static_cast<std::size_t>(node);
    const int parent = parents[i];
    if (tokens[i] == kAbsentDraw) continue;
    assert(parent < 0 || compact[static_cast<std::size_t>(parent)] >= 0);
    // A chain's siblings (nodes 1 .. siblings here) come last, drawn with its first token
    // without replacement where sampled.
    if (node >= 1 && node <= shape.siblings) {
      ++proposal_.siblings;
      if (stochastic_) proposal_.tree.draw.front() = SiblingDraw::kWithoutReplacement;
    }
    compact[i] = proposal_.tree.add_node(parent < 0 ? -1 : compact[static_cast<std::size_t>(parent)], tokens[i]);
    kept.push_back(node);
  }
  fed_nodes_ = static_cast<int>(std::find_if(kept.begin(), kept.end(), [&](int i) { return i >= shape.fed; }) - kept.begin());
  level_ = depth.empty() ? 0 : *std::max_element(depth.begin(), depth.end());
  frontier_.clear();
  pending_.reset();
  return kept;
}

std::vector<int> TreeGrowth::device_drawn(const DeviceShape& shape, std::span<const int> tokens,
                                          std::span<const int> parents, std::span<const float> q, int vocab) {
  assert(shape.on() && static_cast<int>(tokens.size()) == shape.nodes);
  assert(shape.sampled() && !shape.dynamic.on() ? q.size() == tokens.size() * static_cast<std::size_t>(vocab)
                                                 : q.empty());
  if (shape.dynamic.on()) return complete_tree(shape, parents, tokens);
  const std::vector<int> kept = complete_tree(shape, shape.held_parents, tokens);
  if (!shape.is_tree()) {
    proposal_.q.assign(q.begin(), q.end());
    return kept;
  }
  if (q.empty()) return kept;
  // A context's distribution is the one its children were drawn from; a context without
  // children keeps a zero row.
  const std::size_t v = static_cast<std::size_t>(vocab);
  std::vector<int> compact(tokens.size(), -1);
  for (std::size_t k = 0; k < kept.size(); ++k) compact[static_cast<std::size_t>(kept[k])] = static_cast<int>(k);
  proposal_.q.assign((kept.size() + 1) * v, 0.0f);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int parent = shape.parents[i];
    if (parent >= 0 && compact[static_cast<std::size_t>(parent)] < 0) continue;
    const std::size_t context = parent < 0 ? 0 : static_cast<std::size_t>(compact[static_cast<std::size_t>(parent)]) + 1;
    std::copy_n(q.begin() + static_cast<std::ptrdiff_t>(i * v), v, proposal_.q.begin() + static_cast<std::ptrdiff_t>(context * v));
  }
  return kept;
}

std::vector<int> TreeGrowth::device_left(const DeviceShape& shape, std::shared_ptr<const DeviceDraws> draws,
                                         std::span<const int> node_draws) {
  assert(shape.on() && static_cast<int>(node_draws.size()) == shape.nodes);
  const std::vector<int> kept = complete_tree(shape, shape.held_parents, std::vector<int>(node_draws.size(), 0));
  proposal_.draws = std::move(draws);
  proposal_.node_draws.clear();
  for (const int node : kept) proposal_.node_draws.push_back(node_draws[static_cast<std::size_t>(node)]);
  return kept;
}

Proposal TreeGrowth::take(int vocab) {
  assert(!pending_);
  const std::size_t v = static_cast<std::size_t>(vocab);
  const bool needs_q = std::any_of(proposal_.tree.draw.begin(), proposal_.tree.draw.end(),
                                   [](SiblingDraw d) { return d != SiblingDraw::kTopK; });
  if (needs_q && proposal_.tree.size() > 0 && !proposal_.draws) {
    proposal_.q.resize(static_cast<std::size_t>(proposal_.tree.num_contexts()) * v, 0.0f);  // unfed leaves
  } else {
    proposal_.q.clear();
  }
  return std::move(proposal_);
}

void TreeGrowth::accepted(int drafted, int accepted) {
  if (!shape_.adaptive || shape_.dynamic_budget > 0) return;
  if (drafted > 0 && accepted == drafted)
    gamma_ = std::min(gamma_ + 1, kMaxAdaptiveGamma);
  else if (accepted < drafted)
    gamma_ = std::max(gamma_ - 1, 1);
}

}  // namespace specula
