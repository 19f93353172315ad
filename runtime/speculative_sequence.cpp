#include "runtime/speculative_sequence.h"

#include <algorithm>
#include <map>
#include <memory>

#include "base/error.h"
#include "runtime/lap_timer.h"

namespace specula {

static_assert(kDrawSampled == static_cast<int>(SiblingDraw::kSampled));
static_assert(kDrawWithoutReplacement == static_cast<int>(SiblingDraw::kWithoutReplacement));
static_assert(kDrawTopK == static_cast<int>(SiblingDraw::kTopK));
static_assert(kMaxDeviceLogprobs == kMaxLogprobs);

DeviceDrafting run_drafts(std::span<SpeculativeSequence* const> seqs, std::span<const DraftBound> bounds,
                          std::vector<DraftCall>* calls, bool device_verify) {
  std::vector<Drafter*> drafters;
  const auto leave = std::make_unique<bool[]>(seqs.size());
  DeviceDrafting out;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->start_draft(bounds[i]);
    drafters.push_back(&seqs[i]->drafter());
    leave[i] = device_verify && seqs[i]->verifies_on_device();
  }
  out.left = run_draft_forwards(drafters, calls, std::span<const bool>(leave.get(), seqs.size()));
  out.chains = static_cast<int>(std::count_if(drafters.begin(), drafters.end(), [](const Drafter* d) { return d->drawn_on_device(); }));
  return out;
}

SpeculativeSequence::SpeculativeSequence(const ForwardContext& target, KvCache::SeqId seq,
                                         std::unique_ptr<Drafter> drafter, const Sampler& sampler,
                                         std::vector<int> committed, Philox rng, VerifyRule rule,
                                         RowControls controls)
    : target_(target),
      seq_(seq),
      drafter_(std::move(drafter)),
      sampler_(sampler),
      rule_(rule),
      controls_(controls),
      committed_(std::move(committed)),
      rng_(rng) {}

SpeculativeSequence::~SpeculativeSequence() {
  drafter_.reset();  // a model drafter frees its own cache sequence
  target_.cache.free(seq_);
}

SequenceRows TreeVerifyRows::build(KvCache::SeqId seq, std::span<const int> committed, const TokenTree& tree,
                                   bool grown_on_device) {
  const int n = tree.size();
  const int root_position = static_cast<int>(committed.size()) - 1;
  tokens.assign(1, committed.back());
  positions.assign(1, root_position);
  parents.assign(1, -1);
  for (int i = 0; i < n; ++i) {
    tokens.push_back(tree.tokens[static_cast<std::size_t>(i)]);
    positions.push_back(root_position + (grown_on_device ? 1 : tree.depth[static_cast<std::size_t>(i)]));
    parents.push_back(tree.parent[static_cast<std::size_t>(i)] + 1);
  }
  return SequenceRows{seq, tokens, positions, parents, RowLogits::kAll};
}

const SequenceRows& SpeculativeSequence::verify_rows() {
  if (plain_) {
    proposal_ = Proposal();
    proposal_.tree = TokenTree::chain({}, SiblingDraw::kTopK);
  } else {
    proposal_ = drafter_->take_proposal();
  }
  prefix_ = target_.cache.length(seq_);
  verify_rows_ = rows_.build(seq_, committed_, proposal_.tree, proposal_.draws && proposal_.draws->tree_budget() > 0);
  return verify_rows_;
}

const VerifyResult& SpeculativeSequence::verify_and_commit(std::span<const float> logits, SpeculativeStats& stats) {
  SPECULA_CHECK(!proposal_.draws, "speculative step: a proposal left on the draft device is verified there (device_verify)");
  const int vocab = target_.backend.config().vocab_size;
  const TokenTree& tree = proposal_.tree;
  const int n = tree.size();
  auto mark = Clock::now();
  auto row = [vocab](std::span<const float> rows, int context) {
    return rows.subspan(static_cast<std::size_t>(context) * vocab, static_cast<std::size_t>(vocab));
  };
  // The sampler reads every context's row edited by the controls over its own path.
  if (controls_.active()) {
    edited_.assign(logits.begin(), logits.end());
    for (int c = 0; c <= n; ++c) {
      tree.path_tokens(c, context_path_);
      controls_.apply(committed_, context_path_, std::span(edited_).subspan(static_cast<std::size_t>(c) * vocab, vocab));
    }
  }
  const std::span<const float> sampled = controls_.active() ? std::span<const float>(edited_) : logits;
  if (sampler_.is_greedy()) {
    argmaxes_.resize(static_cast<std::size_t>(n + 1));
    for (int c = 0; c <= n; ++c) argmaxes_[static_cast<std::size_t>(c)] = greedy_token(row(sampled, c));
    result_ = verify_greedy(tree, argmaxes_);
  } else {
    p_.resize(logits.size());
    for (int c = 0; c <= n; ++c)
      sampler_.distribution(row(sampled, c), std::span(p_).subspan(static_cast<std::size_t>(c) * vocab, vocab));
    result_ = verify_with(rule_, tree, p_, proposal_.q, vocab, draw_verify_uniforms(tree, rng_));
  }
  if (logprob_top_ >= 0) {
    // Token k of the result was drawn at context 0 (k = 0) or after accepted node k - 1.
    logprobs_.clear();
    for (std::size_t k = 0; k < result_.tokens.size(); ++k) {
      const int context = k == 0 ? 0 : result_.accepted_nodes[k - 1] + 1;
      std::span<const float> source_row = row(logits, context);
      if (logprob_source_ == LogprobSource::kProcessed && sampler_.is_greedy()) {
        processed_row_.resize(source_row.size());
        sampler_.distribution(row(sampled, context), processed_row_);
        source_row = processed_row_;
      } else if (logprob_source_ == LogprobSource::kProcessed) {
        source_row = row(p_, context);
      }
      logprobs_.push_back(token_logprob(logprob_source_, source_row, result_.tokens[k], logprob_top_));
    }
  }
  stats.sample_verify_s += lap(mark);
  return commit(stats, mark);
}

bool SpeculativeSequence::verifies_on_device() const { return target_.backend.verifies_on_device(); }

DeviceVerify SpeculativeSequence::device_verify(int part, const SamplingOptions& sampling) {
  const TokenTree& tree = proposal_.tree;
  DeviceVerify v;
  v.part = part;
  v.tokens = tree.tokens;
  v.parents = tree.parent;
  v.draws = proposal_.draws.get();
  v.node_draws = proposal_.node_draws;
  v.logprob_top = logprob_top_;
  v.logprob_source = logprob_source_ == LogprobSource::kProcessed ? kLogprobProcessed : kLogprobRaw;
  const int vocab = target_.backend.config().vocab_size;
  if (controls_.active() && proposal_.draws) {
    // Every context's edits over its own path, made on the device from the drawn tokens.
    controls_.path_edits(committed_, vocab, path_edits_);
    v.path_edits = &path_edits_;
  } else if (controls_.active()) {
    // Every context's edits over its own path, as verify_and_commit edits its rows.
    edits_.clear();
    edit_first_.assign(1, 0);
    for (int c = 0; c <= tree.size(); ++c) {
      tree.path_tokens(c, context_path_);
      controls_.edits(committed_, context_path_, vocab, context_edits_);
      edits_.insert(edits_.end(), context_edits_.begin(), context_edits_.end());
      edit_first_.push_back(static_cast<int>(edits_.size()));
    }
    v.edits = edits_;
    v.edit_first = edit_first_;
    v.repetition_penalty = controls_.controls->repetition_penalty;
    v.frequency_penalty = controls_.controls->frequency_penalty;
    v.presence_penalty = controls_.controls->presence_penalty;
  }
  if (sampler_.is_greedy()) return v;
  v.temperature = sampling.temperature;
  v.top_k = sampling.top_k;
  v.top_p = sampling.top_p;
  v.min_p = sampling.min_p;
  draw_codes_.clear();
  for (const SiblingDraw d : tree.draw) draw_codes_.push_back(static_cast<int>(d));
  uniforms_ = draw_verify_uniforms(tree, rng_);
  v.draw = draw_codes_;
  v.q = proposal_.q;
  v.uniforms = uniforms_;
  static_assert(kRuleToken == static_cast<int>(VerifyRule::kToken) && kRuleBlock == static_cast<int>(VerifyRule::kBlock) &&
                kRuleTraversal == static_cast<int>(VerifyRule::kTraversal));
  v.rule = static_cast<int>(rule_);
  return v;
}

const VerifyResult& SpeculativeSequence::commit_verdict(DeviceVerdict verdict, SpeculativeStats& stats) {
  if (proposal_.draws) {
    SPECULA_CHECK(verdict.drafted.size() == proposal_.tree.tokens.size(), "speculative step: the verdict gives ",
                  verdict.drafted.size(), " drafted tokens for ", proposal_.tree.tokens.size(), " nodes");
    if (verdict.parents.empty()) {
      proposal_.tree.tokens = std::move(verdict.drafted);
    } else {  // a dynamic tree grown on the device: its structure too
      TokenTree grown(proposal_.tree.draw.front());
      for (std::size_t i = 0; i < verdict.parents.size(); ++i) grown.add_node(verdict.parents[i], verdict.drafted[i]);
      proposal_.tree = std::move(grown);
    }
    proposal_.draws.reset();
  }
  result_.accepted_nodes = std::move(verdict.accepted_nodes);
  result_.tokens = std::move(verdict.tokens);
  if (logprob_top_ >= 0) {
    SPECULA_CHECK(verdict.logprobs.size() == result_.tokens.size() && verdict.top.size() == result_.tokens.size(),
                  "speculative step: the verdict gives ", verdict.logprobs.size(), " log-probabilities for ",
                  result_.tokens.size(), " tokens");
    logprobs_.clear();
    for (std::size_t k = 0; k < result_.tokens.size(); ++k)
      logprobs_.push_back(TokenLogprob{result_.tokens[k], verdict.logprobs[k], std::move(verdict.top[k])});
  }
  return commit(stats, Clock::now());
}

const VerifyResult& SpeculativeSequence::commit(SpeculativeStats& stats, Clock::time_point mark) {
  const TokenTree& tree = proposal_.tree;
  path_.assign(1, 0);
  for (int node : result_.accepted_nodes) path_.push_back(node + 1);
  target_.cache.commit(seq_, prefix_, path_);
  committed_.insert(committed_.end(), result_.tokens.begin(), result_.tokens.end());
  if (!plain_) drafter_->accept(tree, result_.accepted_nodes, committed_);
  plain_ = false;
  stats.commit_s += lap(mark);

  ++stats.steps;
  stats.drafted += std::count_if(tree.tokens.begin(), tree.tokens.end(), [](int t) { return t != kAbsentDraw; });
  stats.accepted += static_cast<long>(result_.accepted_nodes.size());
  if (stats.accepted_at_depth.size() < result_.accepted_nodes.size())
    stats.accepted_at_depth.resize(result_.accepted_nodes.size());
  for (std::size_t d = 0; d < result_.accepted_nodes.size(); ++d) ++stats.accepted_at_depth[d];
  stats.count_ranks(tree, result_.accepted_nodes);
  const ChainStep chain = last_chain();
  stats.siblings += chain.siblings;
  stats.siblings_accepted += chain.sibling_accepted ? 1 : 0;
  return result_;
}

void SpeculativeStats::count_ranks(const TokenTree& tree, std::span<const int> accepted_nodes) {
  int context = 0;
  for (std::size_t d = 0; d <= accepted_nodes.size(); ++d) {
    std::vector<int> children = tree.children(context);
    std::erase_if(children, [&](int c) { return tree.tokens[static_cast<std::size_t>(c)] == kAbsentDraw; });
    if (children.empty()) return;
    if (rank_tried.size() <= d) {
      rank_tried.resize(d + 1);
      rank_accepted.resize(d + 1);
    }
    if (rank_tried[d].size() < children.size()) {
      rank_tried[d].resize(children.size());
      rank_accepted[d].resize(children.size());
    }
    const int next = d < accepted_nodes.size() ? accepted_nodes[d] : -1;
    for (std::size_t rank = 0; rank < children.size(); ++rank) {
      ++rank_tried[d][rank];
      if (children[rank] == next) {
        ++rank_accepted[d][rank];
        break;
      }
    }
    context = next + 1;
  }
}

ChainStep SpeculativeSequence::last_chain() const {
  const int chain = proposal_.tree.size() - proposal_.siblings;
  const std::vector<int>& path = result_.accepted_nodes;
  const bool sibling_accepted = !path.empty() && path.front() >= chain;
  // Siblings drawn on a device keep their nodes where their distribution ran out (absent).
  const std::span<const int> siblings = std::span(proposal_.tree.tokens).subspan(static_cast<std::size_t>(chain));
  const int drawn = static_cast<int>(std::count_if(siblings.begin(), siblings.end(), [](int t) { return t != kAbsentDraw; }));
  return {chain, sibling_accepted ? 0 : static_cast<int>(path.size()), proposal_.stopped, drawn, sibling_accepted};
}

const VerifyResult& SpeculativeSequence::step(DraftBound bound, SpeculativeStats& stats) {
  SpeculativeSequence* self = this;
  return *speculative_step(std::span(&self, 1), std::span(&bound, 1), target_, stats).front();
}

std::vector<float> verify_forward(std::span<const SequenceRows> parts, const ForwardContext& target,
                                  SpeculativeStats& stats, Clock::time_point start) {
  const std::size_t vocab = static_cast<std::size_t>(target.backend.config().vocab_size);
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * vocab);
  target.run(parts, logits);
  ++stats.target_forwards;
  stats.target_rows += batch_rows(parts);
  stats.verify_forward_s += lap(start);
  return logits;
}

std::vector<const VerifyResult*> speculative_step(std::span<SpeculativeSequence* const> seqs,
                                                  std::span<const DraftBound> bounds, const ForwardContext& target,
                                                  SpeculativeStats& stats) {
  auto mark = Clock::now();
  run_drafts(seqs, bounds);
  stats.draft_s += lap(mark);

  std::vector<SequenceRows> parts;
  for (SpeculativeSequence* s : seqs) parts.push_back(s->verify_rows());
  const std::vector<float> logits = verify_forward(parts, target, stats, mark);
  const std::size_t vocab = static_cast<std::size_t>(target.backend.config().vocab_size);

  std::vector<const VerifyResult*> results;
  std::size_t row = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::size_t rows = parts[i].tokens.size();
    results.push_back(&seqs[i]->verify_and_commit(std::span(logits).subspan(row * vocab, rows * vocab), stats));
    row += rows;
  }
  return results;
}

}  // namespace specula
