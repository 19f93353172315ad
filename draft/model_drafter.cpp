#include "draft/model_drafter.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <queue>

#include "draft/sibling_draw.h"
#include "engine/error.h"

namespace specula {
namespace {

// How the children of every context are drawn, given the proposer's configuration.
SiblingDraw draw_mode(bool stochastic, const TreeShape& shape) {
  if (!stochastic || shape.dynamic_budget > 0) return SiblingDraw::kTopK;
  const bool chain = std::all_of(shape.branching.begin(), shape.branching.end(), [](int b) { return b == 1; });
  return chain ? SiblingDraw::kSampled : SiblingDraw::kWithoutReplacement;
}

}  // namespace

ModelDrafter::ModelDrafter(Model& draft, PagedKvCache& cache, PagedKvCache::SeqId seq, DistributionFn distribution,
                           bool stochastic, TreeShape shape)
    : draft_(draft),
      cache_(cache),
      seq_(seq),
      distribution_(std::move(distribution)),
      stochastic_(stochastic),
      shape_(std::move(shape)),
      gamma_(static_cast<int>(shape_.branching.size())) {
  SPECULA_CHECK(shape_.dynamic_budget > 0 || !shape_.branching.empty(), "draft: empty tree shape");
  for (int b : shape_.branching) SPECULA_CHECK(b >= 1, "--tree: every branching factor must be >= 1, got ", b);
}

ModelDrafter::~ModelDrafter() { cache_.free(seq_); }

void ModelDrafter::feed(const TokenTree& tree, int first, int last, int root_position, std::vector<float>& q) {
  const int vocab = draft_.config().vocab_size;
  const int n = last - first;
  std::vector<int> positions(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) positions[i] = root_position + tree.depth[first + i];
  logits_.resize(static_cast<std::size_t>(n) * vocab);
  draft_.forward(cache_, seq_,
                 {std::span(tree.tokens).subspan(first, n), positions, std::span(tree.parent).first(last), true},
                 logits_);
  ++forwards_;
  for (int i = 0; i < n; ++i) {
    q.resize(q.size() + vocab);
    distribution_(std::span(logits_).subspan(static_cast<std::size_t>(i) * vocab, vocab),
                  std::span(q).last(vocab));
  }
  fed_nodes_ = last;
}

Proposal ModelDrafter::propose(std::span<const int> committed, int max_depth, Philox& rng) {
  const int vocab = draft_.config().vocab_size;
  const int cached = cache_.length(seq_);
  const int total = static_cast<int>(committed.size());
  assert(cached < total);
  const int root_position = total - 1;

  // Catch up: every committed token not yet in the draft cache (the root at least).
  std::vector<int> positions(static_cast<std::size_t>(total - cached));
  for (int i = cached; i < total; ++i) positions[i - cached] = i;
  logits_.resize(vocab);
  draft_.forward(cache_, seq_, {committed.subspan(cached), positions, {}, false}, logits_);
  ++forwards_;
  prefix_end_ = total;
  fed_nodes_ = 0;

  Proposal proposal;
  proposal.tree = TokenTree(draw_mode(stochastic_, shape_));
  proposal.q.resize(vocab);
  distribution_(logits_, proposal.q);

  if (max_depth > 0) {
    if (shape_.dynamic_budget > 0) {
      grow_dynamic(proposal, max_depth, root_position);
    } else {
      std::vector<int> branching = shape_.branching;
      if (shape_.adaptive) branching.assign(static_cast<std::size_t>(gamma_), 1);
      branching.resize(std::min<std::size_t>(branching.size(), static_cast<std::size_t>(max_depth)));
      grow_static(proposal, branching, root_position, rng);
    }
  }
  const bool needs_q = std::any_of(proposal.tree.draw.begin(), proposal.tree.draw.end(),
                                   [](SiblingDraw d) { return d != SiblingDraw::kTopK; });
  if (needs_q && proposal.tree.size() > 0) {
    proposal.q.resize(static_cast<std::size_t>(proposal.tree.num_contexts()) * vocab, 0.0f);  // unfed leaves
  } else {
    proposal.q.clear();
  }
  return proposal;
}

void ModelDrafter::grow_static(Proposal& proposal, std::span<const int> branching, int root_position, Philox& rng) {
  const int vocab = draft_.config().vocab_size;
  TokenTree& tree = proposal.tree;
  std::vector<int> frontier{0};  // contexts whose children the next level draws
  for (std::size_t level = 0; level < branching.size() && !frontier.empty(); ++level) {
    const int first = tree.size();
    for (int context : frontier) {
      const auto q_row = std::span<const float>(proposal.q).subspan(static_cast<std::size_t>(context) * vocab, vocab);
      for (int token : draw_siblings(q_row, branching[level], tree.draw[context], rng))
        tree.add_node(context - 1, token);
    }
    const int last = tree.size();
    frontier.clear();
    for (int node = first; node < last; ++node) frontier.push_back(node + 1);
    if (level + 1 < branching.size() && last > first) feed(tree, first, last, root_position, proposal.q);
  }
}

void ModelDrafter::grow_dynamic(Proposal& proposal, int max_depth, int root_position) {
  const int vocab = draft_.config().vocab_size;
  TokenTree& tree = proposal.tree;
  struct Candidate {
    double score;  // cumulative log draft probability of the path
    long order;    // push order: ties go to the earlier (more probable sibling first)
    int parent;
    int token;
    bool operator<(const Candidate& o) const { return score < o.score || (score == o.score && order > o.order); }
  };
  std::priority_queue<Candidate> frontier;
  std::vector<double> node_score;
  long pushed = 0;
  Philox unused(0);  // kTopK draws read no random numbers
  auto push_children = [&](int context, double base) {
    const auto q_row = std::span<const float>(proposal.q).subspan(static_cast<std::size_t>(context) * vocab, vocab);
    for (int token : draw_siblings(q_row, shape_.dynamic_top_k, SiblingDraw::kTopK, unused))
      frontier.push({base + std::log(double(q_row[token])), pushed++, context - 1, token});
  };
  push_children(0, 0.0);
  while (tree.size() < shape_.dynamic_budget && !frontier.empty()) {
    const int first = tree.size();
    while (tree.size() < shape_.dynamic_budget && tree.size() - first < shape_.dynamic_width && !frontier.empty()) {
      const Candidate best = frontier.top();
      frontier.pop();
      tree.add_node(best.parent, best.token);
      node_score.push_back(best.score);
    }
    const int last = tree.size();
    if (tree.size() >= shape_.dynamic_budget) break;
    const bool expandable = std::any_of(tree.depth.begin() + first, tree.depth.end(), [&](int d) { return d < max_depth; });
    if (!expandable) continue;  // leaves at max_depth need no draft forward
    const int unfed = fed_nodes_;
    feed(tree, unfed, last, root_position, proposal.q);  // fed nodes stay a prefix of node order
    for (int node = unfed; node < last; ++node)
      if (tree.depth[node] < max_depth) push_children(node + 1, node_score[node]);
  }
}

void ModelDrafter::accept(const TokenTree& tree, std::span<const int> accepted_nodes, std::span<const int>) {
  std::vector<int> fed_path;
  for (int node : accepted_nodes)
    if (node < fed_nodes_) fed_path.push_back(node);
  cache_.commit(seq_, prefix_end_, fed_path);
  if (shape_.adaptive && shape_.dynamic_budget == 0) {
    const int drafted = tree.size();
    if (drafted > 0 && static_cast<int>(accepted_nodes.size()) == drafted)
      gamma_ = std::min(gamma_ + 1, kMaxAdaptiveGamma);
    else if (static_cast<int>(accepted_nodes.size()) < drafted)
      gamma_ = std::max(gamma_ - 1, 1);
  }
}

}  // namespace specula
