#include "sampling/beam_search.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "base/error.h"
#include "sampling/sampler.h"

namespace specula {
namespace {

// Candidate order: larger sum first, ties to the lower (beam, token), i.e. the lower index
// in HF's flattened [beam * vocab + token] layout.
bool before(const BeamChoice& a, const BeamChoice& b) {
  if (a.sum_logprob != b.sum_logprob) return a.sum_logprob > b.sum_logprob;
  return a.parent != b.parent ? a.parent < b.parent : a.token < b.token;
}

std::vector<int> extended(const std::vector<int>& tokens, int token) {
  std::vector<int> out = tokens;
  out.push_back(token);
  return out;
}

bool by_score(const BeamHypothesis& a, const BeamHypothesis& b) { return a.score < b.score; }

// The sequences this search forked; whatever is still held is released on destruction.
class Forks {
 public:
  explicit Forks(BeamLanguageModel& model) : model_(model) {}
  Forks(const Forks&) = delete;
  Forks& operator=(const Forks&) = delete;
  ~Forks() {
    for (int seq : held_) model_.release(seq);
  }

  int fork(int seq) {
    held_.push_back(model_.fork(seq));
    return held_.back();
  }
  void release(int seq) {
    held_.erase(std::find(held_.begin(), held_.end(), seq));
    model_.release(seq);
  }

 private:
  BeamLanguageModel& model_;
  std::vector<int> held_;
};

}  // namespace

BeamSearch::BeamSearch(const SamplingOptions& options, int max_new_tokens, std::span<const int> eos_ids, int vocab,
                       LogitControls controls, std::span<const int> prompt, HypothesisEnds ends)
    : width_(options.beam_width),
      length_penalty_(options.length_penalty),
      max_new_tokens_(max_new_tokens),
      eos_ids_(eos_ids.begin(), eos_ids.end()),
      vocab_(vocab),
      controls_(std::move(controls)),
      prompt_(prompt.begin(), prompt.end()),
      ends_(std::move(ends)) {
  validate_sampling_options(options);
  validate_logit_controls(controls_, vocab, {});
  beams_.push_back({{}, 0.0});  // the prompt
  SPECULA_CHECK(max_new_tokens >= 1, "--max-new-tokens must be >= 1 for beam search, got ", max_new_tokens);
  assert(std::all_of(eos_ids_.begin(), eos_ids_.end(), [vocab](int eos) { return eos >= 0 && eos < vocab; }));
}

bool BeamSearch::is_eos(int token) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
}

bool BeamSearch::ends(const BeamChoice& candidate) {
  if (is_eos(candidate.token)) return true;
  if (!ends_) return false;
  const std::vector<int>& parent = beams_[static_cast<std::size_t>(candidate.parent)].tokens;
  extended_.assign(parent.begin(), parent.end());
  extended_.push_back(candidate.token);
  return ends_(extended_);
}

double BeamSearch::worst_finished() const {
  return std::min_element(finished_.begin(), finished_.end(), by_score)->score;
}

// HF's BeamHypotheses.add: a newcomer must beat the worst strictly once W are finished; on
// overflow the worst goes (the first minimum: the earliest added, the one HF removes).
void BeamSearch::finish(std::vector<int> tokens, double sum_logprob) {
  const double score = sum_logprob / std::pow(double(tokens.size()), length_penalty_);
  const bool full = static_cast<int>(finished_.size()) >= width_;
  if (full && !(score > worst_finished())) return;
  finished_.push_back({std::move(tokens), sum_logprob, score});
  if (static_cast<int>(finished_.size()) > width_)
    finished_.erase(std::min_element(finished_.begin(), finished_.end(), by_score));
}

const std::vector<BeamChoice>& BeamSearch::step(std::span<const std::span<const float>> rows) {
  assert(!done_ && rows.size() == beams_.size());
  ++steps_;
  // The best 2W candidates: each beam's best 2W finite tokens by edited log_softmax (double),
  // then merged.
  const int count = 2 * width_;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const bool controlled = controls_.active();
  candidates_.clear();
  scores_.resize(static_cast<std::size_t>(vocab_));
  for (int b = 0; b < num_beams(); ++b) {
    const std::span<const float> row = rows[static_cast<std::size_t>(b)];
    assert(static_cast<int>(row.size()) == vocab_);
    double max = -kInf;
    for (int t = 0; t < vocab_; ++t) {
      SPECULA_CHECK(row[t] < kInf, "beam search: logit ", t, " is ", row[t]);  // NaN or +inf
      max = std::max(max, double(row[t]));
    }
    SPECULA_CHECK(max > -kInf, "beam search: every logit is -inf");
    double sum = 0.0;
    for (int t = 0; t < vocab_; ++t) sum += std::exp(double(row[t]) - max);
    const double log_normaliser = max + std::log(sum);
    for (int t = 0; t < vocab_; ++t) scores_[static_cast<std::size_t>(t)] = row[t] - log_normaliser;
    const Beam& beam = beams_[static_cast<std::size_t>(b)];
    if (controlled) apply_controls(controls_, {prompt_, beam.tokens, {}, eos_ids_}, scores_);
    row_candidates_.clear();
    for (int t = 0; t < vocab_; ++t)
      if (scores_[static_cast<std::size_t>(t)] > -kInf)
        row_candidates_.push_back({b, t, beam.sum_logprob + scores_[static_cast<std::size_t>(t)]});
    const auto per_beam = row_candidates_.begin() + std::min<std::ptrdiff_t>(count, std::ssize(row_candidates_));
    std::partial_sort(row_candidates_.begin(), per_beam, row_candidates_.end(), before);
    candidates_.insert(candidates_.end(), row_candidates_.begin(), per_beam);
  }
  SPECULA_CHECK(!candidates_.empty() || !finished_.empty(), "beam search: after ", steps_ - 1,
                " tokens the logit controls leave no token of finite score, and no hypothesis has finished");
  std::sort(candidates_.begin(), candidates_.end(), before);
  candidates_.resize(std::min<std::size_t>(candidates_.size(), static_cast<std::size_t>(count)));

  // In rank order: a candidate that does not end becomes a next beam (until W), an ending one
  // of rank < W a finished hypothesis.
  chosen_.clear();
  for (std::size_t rank = 0; rank < candidates_.size() && static_cast<int>(chosen_.size()) < width_; ++rank) {
    const BeamChoice& c = candidates_[rank];
    if (!ends(c)) {
      chosen_.push_back(c);
    } else if (static_cast<int>(rank) < width_) {
      finish(extended(beams_[static_cast<std::size_t>(c.parent)].tokens, c.token), c.sum_logprob);
    }
  }
  // Without a next beam (every candidate ending, or none finite) the search ends.
  const bool full = static_cast<int>(finished_.size()) >= width_;
  if (chosen_.empty() ||
      (full && worst_finished() >= candidates_.front().sum_logprob / std::pow(double(steps_), length_penalty_))) {
    done_ = true;
  } else if (steps_ == max_new_tokens_) {
    // At the limit the live beams join the finished set as they are (no EOS).
    for (const BeamChoice& c : chosen_)
      finish(extended(beams_[static_cast<std::size_t>(c.parent)].tokens, c.token), c.sum_logprob);
    done_ = true;
  }
  if (done_) {
    chosen_.clear();
    beams_.clear();
    return chosen_;
  }
  std::vector<Beam> next;
  next.reserve(chosen_.size());
  for (const BeamChoice& c : chosen_)
    next.push_back({extended(beams_[static_cast<std::size_t>(c.parent)].tokens, c.token), c.sum_logprob});
  beams_ = std::move(next);
  return chosen_;
}

// Score descending; equal scores: the later added first (HF pops from a stable ascending sort).
BeamResult BeamSearch::result(int n_best) && {
  SPECULA_CHECK(n_best >= 1 && n_best <= width_, "beam search returns 1 to --beam-width = ", width_,
                " hypotheses, asked for ", n_best);
  std::vector<BeamHypothesis> items = std::move(finished_);
  std::reverse(items.begin(), items.end());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  items.resize(std::min<std::size_t>(items.size(), static_cast<std::size_t>(n_best)));
  return {std::move(items)};
}

BeamResult beam_search(BeamLanguageModel& model, int root_seq, std::span<const float> root_logits,
                       const SamplingOptions& options, int max_new_tokens, std::span<const int> eos_ids,
                       int n_best, const LogitControls& controls, std::span<const int> prompt,
                       HypothesisEnds ends) {
  const int vocab = model.vocab_size();
  BeamSearch search(options, max_new_tokens, eos_ids, vocab, controls, prompt, std::move(ends));
  SPECULA_CHECK(n_best >= 1 && n_best <= search.width(), "beam search returns 1 to --beam-width = ", search.width(),
                " hypotheses, asked for ", n_best);
  assert(static_cast<int>(root_logits.size()) == vocab);

  Forks forks(model);
  std::vector<int> seqs{root_seq};  // of the live beams
  std::vector<float> logits(root_logits.begin(), root_logits.end());  // [seqs.size(), vocab]
  std::vector<std::span<const float>> rows;
  std::vector<int> next_seqs, tokens;
  for (;;) {
    rows.clear();
    for (std::size_t b = 0; b < seqs.size(); ++b)
      rows.push_back(std::span<const float>(logits).subspan(b * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab)));
    const std::vector<BeamChoice>& chosen = search.step(rows);
    if (search.done()) break;
    // Every chosen candidate gets a sequence — the first child of a forked parent takes the
    // parent's sequence, the others fork it (all forks before any feed) — the parents left
    // without a child are released, then the new tokens are fed.
    next_seqs.clear();
    tokens.clear();
    std::vector<char> taken(seqs.size(), 0);
    for (const BeamChoice& c : chosen) {
      const int parent = seqs[static_cast<std::size_t>(c.parent)];
      const bool reuse = parent != root_seq && !taken[static_cast<std::size_t>(c.parent)];
      taken[static_cast<std::size_t>(c.parent)] = 1;
      next_seqs.push_back(reuse ? parent : forks.fork(parent));
      tokens.push_back(c.token);
    }
    for (std::size_t b = 0; b < seqs.size(); ++b)
      if (seqs[b] != root_seq && !taken[b]) forks.release(seqs[b]);
    seqs.swap(next_seqs);
    logits.resize(seqs.size() * static_cast<std::size_t>(vocab));
    model.step(seqs, tokens, logits);
  }
  return std::move(search).result(n_best);
}

}  // namespace specula
