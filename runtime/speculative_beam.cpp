#include "runtime/speculative_beam.h"

#include <algorithm>
#include <cassert>

#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
#include "runtime/decoders.h"
#include "runtime/lap_timer.h"

namespace specula {
namespace {

class ModelBeamDrafters final : public BeamDrafters {
 public:
  ModelBeamDrafters(const DraftOptions& d, const ForwardContext& draft, KvCache::SeqId root_seq)
      : draft_(draft),
        root_seq_(root_seq),
        distribution_(draft_distribution(SamplingOptions{}, d)),  // deterministic top-k
        shape_(tree_shape(d)) {}

  std::unique_ptr<Drafter> root() override { return make(draft_.cache.fork(root_seq_)); }
  std::unique_ptr<Drafter> child(Drafter& parent, int parent_committed) override {
    const KvCache::SeqId seq = draft_.cache.fork(static_cast<ModelDrafter&>(parent).seq());
    draft_.cache.truncate(seq, std::min(parent_committed, draft_.cache.length(seq)));  // drop the tree
    return make(seq);
  }
  void retire(Drafter& drafter) override { forwards_ += static_cast<ModelDrafter&>(drafter).draft_forwards(); }
  long draft_forwards() const override { return forwards_; }

 private:
  std::unique_ptr<Drafter> make(KvCache::SeqId seq) {
    return std::make_unique<ModelDrafter>(draft_, seq, distribution_, /*stochastic=*/false, shape_);
  }

  ForwardContext draft_;
  KvCache::SeqId root_seq_;
  DistributionFn distribution_;
  TreeShape shape_;
  long forwards_ = 0;
};

class NgramBeamDrafters final : public BeamDrafters {
 public:
  explicit NgramBeamDrafters(const DraftOptions& d) : config_{d.ngram_min, d.ngram_max, d.gamma} {}
  std::unique_ptr<Drafter> root() override { return std::make_unique<NgramDrafter>(config_); }
  std::unique_ptr<Drafter> child(Drafter& parent, int) override {
    return std::make_unique<NgramDrafter>(static_cast<NgramDrafter&>(parent));
  }

 private:
  NgramConfig config_;
};

}  // namespace

std::unique_ptr<BeamDrafters> make_beam_drafters(const DraftOptions& d, const ForwardContext* draft,
                                                 KvCache::SeqId draft_root_seq) {
  assert(d.method != DraftMethod::kNone && !d.adaptive && (d.method != DraftMethod::kModel || draft));
  if (d.method == DraftMethod::kModel) return std::make_unique<ModelBeamDrafters>(d, *draft, draft_root_seq);
  return std::make_unique<NgramBeamDrafters>(d);
}

SpeculativeBeam::SpeculativeBeam(const ForwardContext& target, KvCache::SeqId seq, BeamDrafters& drafters,
                                 const SamplingOptions& options, int max_new_tokens, std::span<const int> eos_ids,
                                 std::span<const int> prompt, const LogitControls& controls, HypothesisEnds ends)
    : target_(target),
      drafters_(drafters),
      search_(options, max_new_tokens, eos_ids, target.backend.config().vocab_size, controls, prompt, std::move(ends)) {
  assert(!prompt.empty() && target.cache.length(seq) == static_cast<int>(prompt.size()) - 1);
  Beam beam;
  beam.seq = seq;
  beam.committed.assign(prompt.begin(), prompt.end());
  try {
    beam.drafter = drafters_.root();
  } catch (...) {
    target_.cache.free(seq);
    throw;
  }
  beams_.push_back(std::move(beam));
}

SpeculativeBeam::~SpeculativeBeam() { release_all(); }

void SpeculativeBeam::release_all() {
  for (Beam& beam : beams_) {
    drafters_.retire(*beam.drafter);
    beam.drafter.reset();  // a model drafter frees its own cache sequence
    target_.cache.free(beam.seq);
  }
  beams_.clear();
}

std::span<Drafter* const> SpeculativeBeam::start_drafts() {
  assert(!done());
  // A tree of depth D gives at most D + 1 beam steps.
  const int max_depth = search_.max_new_tokens() - search_.steps() - 1;
  drafter_ptrs_.clear();
  for (Beam& beam : beams_) {
    beam.drafter->start(beam.committed, {max_depth}, unused_rng_);
    drafter_ptrs_.push_back(beam.drafter.get());
  }
  return drafter_ptrs_;
}

std::span<const SequenceRows> SpeculativeBeam::verify_rows() {
  verify_rows_.clear();
  for (Beam& beam : beams_) {
    beam.proposal = beam.drafter->take_proposal();
    beam.prefix = target_.cache.length(beam.seq);
    verify_rows_.push_back(beam.rows.build(beam.seq, beam.committed, beam.proposal.tree));
  }
  return verify_rows_;
}

int SpeculativeBeam::finish(std::span<const float> logits, SpeculativeStats& stats) {
  auto mark = Clock::now();
  const std::size_t vocab = static_cast<std::size_t>(target_.backend.config().vocab_size);
  std::vector<BeamTree> trees;
  std::size_t row = 0;
  for (const Beam& beam : beams_) {
    const std::size_t rows = static_cast<std::size_t>(beam.proposal.tree.num_contexts());
    trees.push_back({&beam.proposal.tree, logits.subspan(row * vocab, rows * vocab)});
    row += rows;
  }
  assert(row * vocab == logits.size());
  const BeamReplay replay = replay_beam_trees(search_, trees, static_cast<int>(vocab));
  stats.sample_verify_s += lap(mark);

  ++stats.steps;
  for (const Beam& beam : beams_) stats.drafted += beam.proposal.tree.size();
  const int accepted = replay.depths - 1;  // beam steps beyond the one the roots give
  stats.accepted += accepted;
  if (static_cast<int>(stats.accepted_at_depth.size()) < accepted)
    stats.accepted_at_depth.resize(static_cast<std::size_t>(accepted));
  for (int d = 0; d < accepted; ++d) ++stats.accepted_at_depth[static_cast<std::size_t>(d)];

  if (done()) {
    release_all();
    stats.commit_s += lap(mark);
    return replay.depths;
  }
  // New beams: the first child of an origin takes its sequence, the others fork it, all
  // before any commit (a commit rewrites the tree slots the other children still need).
  std::vector<Beam> next(replay.beams.size());
  std::vector<char> taken(beams_.size(), 0);
  for (std::size_t i = 0; i < replay.beams.size(); ++i) {
    const int origin = replay.beams[i].origin;
    Beam& parent = beams_[static_cast<std::size_t>(origin)];
    next[i].seq = taken[static_cast<std::size_t>(origin)] ? target_.cache.fork(parent.seq) : parent.seq;
    taken[static_cast<std::size_t>(origin)] = 1;
    next[i].committed = parent.committed;
    const std::vector<int>& generated = search_.tokens(static_cast<int>(i));
    next[i].committed.insert(next[i].committed.end(), generated.end() - replay.depths, generated.end());
    next[i].drafter = drafters_.child(*parent.drafter, static_cast<int>(parent.committed.size()));
  }
  std::vector<int> path;
  for (std::size_t i = 0; i < replay.beams.size(); ++i) {
    // Keep the root and the path of the first depths - 1 new tokens; the last is the next root.
    const Beam& parent = beams_[static_cast<std::size_t>(replay.beams[i].origin)];
    path.assign(1, 0);
    for (int node : replay.beams[i].path) path.push_back(node + 1);
    target_.cache.commit(next[i].seq, parent.prefix, path);
  }
  for (std::size_t b = 0; b < beams_.size(); ++b) {
    drafters_.retire(*beams_[b].drafter);
    beams_[b].drafter.reset();
    if (!taken[b]) target_.cache.free(beams_[b].seq);
  }
  beams_ = std::move(next);
  stats.commit_s += lap(mark);
  return replay.depths;
}

int speculative_beam_step(SpeculativeBeam& beam, const ForwardContext& target, SpeculativeStats& stats) {
  auto mark = Clock::now();
  run_draft_forwards(beam.start_drafts());
  stats.draft_s += lap(mark);

  return beam.finish(verify_forward(beam.verify_rows(), target, stats, mark), stats);
}

}  // namespace specula
