// defines: BeamLanguageModel (what beam search needs from a model: next-token logits over
// sequences whose caches can be forked), BeamHypothesis / BeamResult, and beam_search, a
// driver with Hugging Face's semantics (transformers 4.38-4.47 BeamSearchScorer, which the
// later vectorised rewrite reproduces), with early_stopping=False, HF's default:
//
//  - Scores are log_softmax of the raw logits (no temperature or top-k/p/min-p: plain beam
//    search), computed in double, accumulated per beam.
//  - Each step takes the best 2W candidates (beam, token) over all live beams, ordered by
//    accumulated log-prob, ties by lower (beam, token).  In that order: an EOS candidate of
//    rank < W becomes a finished hypothesis, one of rank >= W is dropped; other candidates
//    become the next beams until there are W.
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
// One deliberate difference: HF starts with W copies of the prompt scored 0, -1e9, -1e9...;
// this driver starts from the single prompt beam.  The two searches agree whenever the
// first step has at least 2W candidates (vocab >= 2W); with fewer, HF would carry -1e9
// placeholder beams, this driver carries fewer beams.
#pragma once

#include <span>
#include <vector>

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
  double sum_logprob;       // sum of log-probs of `tokens`
  double score;             // sum_logprob / tokens.size() ^ length_penalty
};

struct BeamResult {
  std::vector<BeamHypothesis> hypotheses;  // n-best, score descending
};

// Beam search from a prompt already fed to `root_seq`.  The driver forks root_seq (never
// feeds or releases it: it stays the caller's) and releases every sequence it forked before
// returning, also when the model throws.
//   root_logits: in [vocab], the next-token logits after the prompt
//   options: beam_width (W) and length_penalty are used; all fields are validated
//   eos_id: the end-of-sequence token, or -1 for none
//   n_best: 1..W hypotheses to return (fewer only when fewer were finished)
BeamResult beam_search(BeamLanguageModel& model, int root_seq, std::span<const float> root_logits,
                       const SamplingOptions& options, int max_new_tokens, int eos_id, int n_best);

}  // namespace specula
