#include "sampling/beam_search.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "sampling/sampler.h"

namespace specula {
namespace {

struct Beam {
  int seq;
  std::vector<int> tokens;  // generated so far
  double sum_logprob;
};

struct Candidate {
  double sum_logprob;  // the beam's sum plus the token's log-prob
  int beam;
  int token;
};

// Candidate order: larger sum first, ties to the lower (beam, token), i.e. the lower index
// in HF's flattened [beam * vocab + token] layout.
bool before(const Candidate& a, const Candidate& b) {
  if (a.sum_logprob != b.sum_logprob) return a.sum_logprob > b.sum_logprob;
  return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
}

std::vector<int> extended(const std::vector<int>& tokens, int token) {
  std::vector<int> out = tokens;
  out.push_back(token);
  return out;
}

// The best `count` candidates over all beams: each beam's best `count` tokens by
// log_softmax (double), then merged.  logits: in [beams.size(), vocab]
std::vector<Candidate> top_candidates(const std::vector<Beam>& beams, std::span<const float> logits, int vocab,
                                      int count) {
  const int per_beam = std::min(count, vocab);
  std::vector<Candidate> candidates;
  std::vector<Candidate> row_candidates(vocab);
  for (int b = 0; b < int(beams.size()); ++b) {
    const std::span<const float> row = logits.subspan(size_t(b) * vocab, vocab);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    double max = -kInf;
    for (int t = 0; t < vocab; ++t) {
      SPECULA_CHECK(row[t] < kInf, "beam search: logit ", t, " is ", row[t]);  // NaN or +inf
      max = std::max(max, double(row[t]));
    }
    SPECULA_CHECK(max > -kInf, "beam search: every logit is -inf");
    double sum = 0.0;
    for (int t = 0; t < vocab; ++t) sum += std::exp(double(row[t]) - max);
    const double log_normaliser = max + std::log(sum);
    for (int t = 0; t < vocab; ++t) row_candidates[t] = {beams[b].sum_logprob + (row[t] - log_normaliser), b, t};
    std::partial_sort(row_candidates.begin(), row_candidates.begin() + per_beam, row_candidates.end(), before);
    candidates.insert(candidates.end(), row_candidates.begin(), row_candidates.begin() + per_beam);
  }
  std::sort(candidates.begin(), candidates.end(), before);
  candidates.resize(std::min<size_t>(candidates.size(), count));
  return candidates;
}

// HF's BeamHypotheses: the best `capacity` finished hypotheses, in insertion order.
class FinishedSet {
 public:
  FinishedSet(int capacity, double length_penalty) : capacity_(capacity), length_penalty_(length_penalty) {}

  bool full() const { return int(items_.size()) >= capacity_; }
  double worst() const {
    return std::min_element(items_.begin(), items_.end(), by_score)->score;
  }

  void add(std::vector<int> tokens, double sum_logprob) {
    const double score = sum_logprob / std::pow(double(tokens.size()), length_penalty_);
    if (full() && !(score > worst())) return;
    items_.push_back({std::move(tokens), sum_logprob, score});
    // The first minimum is the earliest added, the one HF removes.
    if (int(items_.size()) > capacity_) items_.erase(std::min_element(items_.begin(), items_.end(), by_score));
  }

  // Score descending; equal scores: the later added first.
  std::vector<BeamHypothesis> best(int n) && {
    std::reverse(items_.begin(), items_.end());
    std::stable_sort(items_.begin(), items_.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
    items_.resize(std::min<size_t>(items_.size(), n));
    return std::move(items_);
  }

 private:
  static bool by_score(const BeamHypothesis& a, const BeamHypothesis& b) { return a.score < b.score; }

  int capacity_;
  double length_penalty_;
  std::vector<BeamHypothesis> items_;
};

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

// Gives every chosen candidate a sequence — the first child of a forked parent takes the
// parent's sequence, the others fork it (all forks before any feed) — releases the parents
// left without a child, then feeds the new tokens.  logits: out [chosen.size(), vocab]
std::vector<Beam> advance(BeamLanguageModel& model, Forks& forks, int root_seq, const std::vector<Beam>& beams,
                          const std::vector<Candidate>& chosen, std::vector<float>& logits) {
  std::vector<Beam> next;
  std::vector<char> taken(beams.size(), 0);
  for (const Candidate& c : chosen) {
    const Beam& parent = beams[c.beam];
    const bool reuse = parent.seq != root_seq && !taken[c.beam];
    taken[c.beam] = 1;
    next.push_back({reuse ? parent.seq : forks.fork(parent.seq), extended(parent.tokens, c.token), c.sum_logprob});
  }
  for (size_t b = 0; b < beams.size(); ++b) {
    if (beams[b].seq != root_seq && !taken[b]) forks.release(beams[b].seq);
  }
  std::vector<int> seqs, tokens;
  for (const Beam& beam : next) {
    seqs.push_back(beam.seq);
    tokens.push_back(beam.tokens.back());
  }
  logits.resize(next.size() * size_t(model.vocab_size()));
  model.step(seqs, tokens, logits);
  return next;
}

}  // namespace

BeamResult beam_search(BeamLanguageModel& model, int root_seq, std::span<const float> root_logits,
                       const SamplingOptions& options, int max_new_tokens, int eos_id, int n_best) {
  validate_sampling_options(options);
  const int width = options.beam_width;
  SPECULA_CHECK(max_new_tokens >= 1, "--max-new-tokens must be >= 1 for beam search, got ", max_new_tokens);
  SPECULA_CHECK(n_best >= 1 && n_best <= width, "beam search returns 1 to --beam-width = ", width,
                " hypotheses, asked for ", n_best);
  const int vocab = model.vocab_size();
  assert(int(root_logits.size()) == vocab && eos_id >= -1 && eos_id < vocab);

  Forks forks(model);
  FinishedSet finished(width, options.length_penalty);
  std::vector<Beam> beams{{root_seq, {}, 0.0}};
  std::vector<float> logits(root_logits.begin(), root_logits.end());  // [beams.size(), vocab]
  for (int step = 1; step <= max_new_tokens; ++step) {
    const std::vector<Candidate> candidates = top_candidates(beams, logits, vocab, 2 * width);
    std::vector<Candidate> chosen;  // the next beams, at most W
    for (size_t rank = 0; rank < candidates.size() && int(chosen.size()) < width; ++rank) {
      const Candidate& c = candidates[rank];
      if (c.token != eos_id) {
        chosen.push_back(c);
      } else if (int(rank) < width) {
        finished.add(extended(beams[c.beam].tokens, c.token), c.sum_logprob);
      }
    }
    const double best_possible = candidates.front().sum_logprob / std::pow(double(step), options.length_penalty);
    if ((finished.full() && finished.worst() >= best_possible) || chosen.empty()) break;
    if (step == max_new_tokens) {
      for (const Candidate& c : chosen) finished.add(extended(beams[c.beam].tokens, c.token), c.sum_logprob);
      break;
    }
    beams = advance(model, forks, root_seq, beams, chosen, logits);
  }
  return {std::move(finished).best(n_best)};
}

}  // namespace specula
