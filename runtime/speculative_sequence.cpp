#include "runtime/speculative_sequence.h"

#include <chrono>

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

double lap(Clock::time_point& mark) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

}  // namespace

SpeculativeSequence::SpeculativeSequence(Model& target, PagedKvCache& cache, PagedKvCache::SeqId seq,
                                         std::unique_ptr<Drafter> drafter, const Sampler& sampler,
                                         std::vector<int> committed, Philox rng)
    : target_(target),
      cache_(cache),
      seq_(seq),
      drafter_(std::move(drafter)),
      sampler_(sampler),
      committed_(std::move(committed)),
      rng_(rng) {}

SpeculativeSequence::~SpeculativeSequence() {
  drafter_.reset();  // a model drafter frees its own cache sequence
  cache_.free(seq_);
}

const VerifyResult& SpeculativeSequence::step(int max_depth, SpeculativeStats& stats) {
  const int vocab = target_.config().vocab_size;
  auto mark = Clock::now();

  const Proposal proposal = drafter_->propose(committed_, max_depth, rng_);
  const TokenTree& tree = proposal.tree;
  const int n = tree.size();
  stats.draft_s += lap(mark);

  // Verify forward: the root (last committed token) and every node in one pass; row c of
  // the logits is context c (0 = after the root, 1 + i = after node i).
  const int prefix = cache_.length(seq_);
  const int root_position = static_cast<int>(committed_.size()) - 1;
  tokens_.assign(1, committed_.back());
  positions_.assign(1, root_position);
  parents_.assign(1, -1);
  for (int i = 0; i < n; ++i) {
    tokens_.push_back(tree.tokens[i]);
    positions_.push_back(root_position + tree.depth[i]);
    parents_.push_back(tree.parent[i] + 1);
  }
  logits_.resize(static_cast<std::size_t>(n + 1) * vocab);
  target_.forward(cache_, seq_, {tokens_, positions_, parents_, true}, logits_);
  stats.verify_forward_s += lap(mark);

  auto row = [vocab](std::span<const float> rows, int context) {
    return rows.subspan(static_cast<std::size_t>(context) * vocab, vocab);
  };
  if (sampler_.is_greedy()) {
    argmaxes_.resize(static_cast<std::size_t>(n + 1));
    for (int c = 0; c <= n; ++c) argmaxes_[c] = argmax(row(logits_, c));
    result_ = verify_greedy(tree, argmaxes_);
  } else {
    p_.resize(logits_.size());
    for (int c = 0; c <= n; ++c)
      sampler_.distribution(row(logits_, c), std::span(p_).subspan(static_cast<std::size_t>(c) * vocab, vocab));
    result_ = verify_stochastic(tree, p_, proposal.q, vocab, draw_verify_uniforms(tree, rng_));
  }
  stats.sample_verify_s += lap(mark);

  // Commit: the target keeps the root and the accepted path; the drafter follows.
  path_.assign(1, 0);
  for (int node : result_.accepted_nodes) path_.push_back(node + 1);
  cache_.commit(seq_, prefix, path_);
  committed_.insert(committed_.end(), result_.tokens.begin(), result_.tokens.end());
  drafter_->accept(tree, result_.accepted_nodes, committed_);
  stats.commit_s += lap(mark);

  ++stats.steps;
  stats.drafted += n;
  stats.accepted += static_cast<long>(result_.accepted_nodes.size());
  if (stats.accepted_at_depth.size() < result_.accepted_nodes.size())
    stats.accepted_at_depth.resize(result_.accepted_nodes.size());
  for (std::size_t d = 0; d < result_.accepted_nodes.size(); ++d) ++stats.accepted_at_depth[d];
  return result_;
}

}  // namespace specula
