// defines: BeamLanguageModel (what beam search needs from a model: next-token logits over
// sequences whose caches can be forked), BeamHypothesis / BeamResult, BeamSearch (the step
// rule as a state machine: one call per step over the live beams' logits, shared by the plain
// driver and speculative beam search's replay) and beam_search, the plain driver, with
// Hugging Face's semantics (transformers 4.38-4.47 BeamSearchScorer, which the
// later vectorised rewrite reproduces), with early_stopping=False, HF's default:
//
//  - Scores are log_softmax of the raw logits (no temperature or top-k/p/min-p: plain beam
//    search), computed in double, then edited by the logit controls (sampling/logit_controls.h)
//    over the history prompt + the beam's own tokens, as HF's logits processors edit
//    next_token_scores (no renormalisation); the edited scores are accumulated per beam.
//  - A candidate of score -inf (banned, a repeated n-gram, an EOS below min_new_tokens) is
//    never taken, so a step may rank fewer than 2W; one with none ends the search (an error
//    when nothing was finished).
//  - Each step takes the best 2W candidates (beam, token) over all live beams, ordered by
//    accumulated score, ties by lower (beam, token).  In that order: an ending candidate (any
//    of the model's EOS ids, or a token the HypothesisEnds rule ends the hypothesis with: a
//    stop string) of rank < W becomes a finished hypothesis, one of rank >= W is dropped;
//    other candidates become the next beams until there are W.
//  - A finished hypothesis scores sum_logprob / L^length_penalty, L = generated tokens
//    excluding the prompt and including the EOS (HF's generated_len = cur_len + 1 -
//    prompt_len).  The finished set keeps the best W (a newcomer must beat the worst
//    strictly; on overflow the worst goes, ties: the earliest added).
//  - Early stopping (HF early_stopping=False heuristic): after a step t (t tokens
//    generated), search stops once W hypotheses are finished and the worst of them is >=
//    best_candidate_logprob / t^length_penalty, best over that step's 2W candidates.
//  - At max_new_tokens, unless stopped early, the live beams are added to the finished set
//    as they are (L = max_new_tokens, no EOS).
//  - n-best: finished set by score descending, ties: the later added first (HF pops from a
//    stable ascending sort).
// Deliberate differences: HF starts with W copies of the prompt scored 0, -1e9, -1e9...;
// this driver starts from the single prompt beam.  The two searches agree whenever the
// first step has at least 2W candidates (vocab >= 2W); with fewer, HF would carry -1e9
// placeholder beams, this driver carries fewer beams.  Likewise where a step has fewer than
// W finite candidates: HF would carry beams of score -inf, this driver carries fewer beams.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "sampling/logit_controls.h"
#include "sampling/sampling_options.h"

namespace specula {

class BeamLanguageModel {
 public:
  virtual ~BeamLanguageModel() = default;
  virtual int vocab_size() const = 0;
  // A new sequence sharing seq's history (a KV-cache fork).
  virtual int fork(int seq) = 0;
  virtual void release(int seq) = 0;
  // Feeds tokens[i] to seqs[i] (one token each, distinct sequences) and writes their
  // next-token logits.  seqs, tokens: in [n]; logits: out [n, vocab]
  virtual void step(std::span<const int> seqs, std::span<const int> tokens, std::span<float> logits) = 0;
};

struct BeamHypothesis {
  std::vector<int> tokens;  // generated tokens, the EOS included when it ended the hypothesis
  double sum_logprob;       // sum of the (control-edited) log-probs of `tokens`
  double score;             // sum_logprob / tokens.size() ^ length_penalty
};

struct BeamResult {
  std::vector<BeamHypothesis> hypotheses;  // n-best, score descending
};

// Whether a hypothesis of these generated tokens (the candidate token last) ends there besides
// EOS; an empty function ends none.
using HypothesisEnds = std::function<bool(std::span<const int> tokens)>;

// A next beam chosen by a step: candidate `token` after live beam `parent`.
struct BeamChoice {
  int parent;
  int token;
  double sum_logprob;  // the parent's sum plus the token's edited log-prob
};

// The step rule above, one step per call. It holds the live beams (generated tokens and
// sums, in the rule's order) and the finished set; it runs no model, so the caller feeds
// the beams it chose and hands their logits to the next step.
class BeamSearch {
 public:
  // options: beam_width (W) and length_penalty are used; all fields are validated.
  // eos_ids: the end-of-sequence tokens (any of them ends a hypothesis; may be empty).
  // controls (validated): the edits of every row; prompt: the tokens before the generated
  // ones, which the controls read; ends: the hypotheses that end besides EOS.
  BeamSearch(const SamplingOptions& options, int max_new_tokens, std::span<const int> eos_ids, int vocab,
             LogitControls controls = {}, std::span<const int> prompt = {}, HypothesisEnds ends = {});

  // One step over the live beams' next-token logits: rows[b] in [vocab] for live beam b.
  // Returns the next live beams in their new order (the previous beams' indices are gone
  // after this call); empty once the search has ended (then done() is true).
  const std::vector<BeamChoice>& step(std::span<const std::span<const float>> rows);

  bool done() const { return done_; }
  int steps() const { return steps_; }  // steps taken = tokens generated by every live beam
  int num_beams() const { return static_cast<int>(beams_.size()); }
  const std::vector<int>& tokens(int beam) const { return beams_[static_cast<std::size_t>(beam)].tokens; }
  int width() const { return width_; }
  int max_new_tokens() const { return max_new_tokens_; }

  // The n-best finished hypotheses (1 <= n_best <= W), score descending.
  BeamResult result(int n_best) &&;

 private:
  struct Beam {
    std::vector<int> tokens;
    double sum_logprob;
  };
  bool is_eos(int token) const;
  bool ends(const BeamChoice& candidate);
  void finish(std::vector<int> tokens, double sum_logprob);
  double worst_finished() const;

  int width_;
  double length_penalty_;
  int max_new_tokens_;
  std::vector<int> eos_ids_;
  int vocab_;
  LogitControls controls_;
  std::vector<int> prompt_;
  HypothesisEnds ends_;
  std::vector<int> extended_;  // scratch: a candidate's tokens
  int steps_ = 0;
  bool done_ = false;
  std::vector<Beam> beams_;
  std::vector<BeamHypothesis> finished_;  // HF's BeamHypotheses: the best W, in insertion order
  std::vector<BeamChoice> chosen_;
  std::vector<BeamChoice> candidates_, row_candidates_;  // scratch
  std::vector<double> scores_;                           // scratch: one beam's edited log-probs
};

// Beam search from a prompt already fed to `root_seq`.  The driver forks root_seq (never
// feeds or releases it: it stays the caller's) and releases every sequence it forked before
// returning, also when the model throws.
//   root_logits: in [vocab], the next-token logits after the prompt
//   options, max_new_tokens, eos_ids, controls, prompt, ends: as BeamSearch
//   n_best: 1..W hypotheses to return (fewer only when fewer were finished)
BeamResult beam_search(BeamLanguageModel& model, int root_seq, std::span<const float> root_logits,
                       const SamplingOptions& options, int max_new_tokens, std::span<const int> eos_ids,
                       int n_best, const LogitControls& controls = {}, std::span<const int> prompt = {},
                       HypothesisEnds ends = {});

}  // namespace specula
