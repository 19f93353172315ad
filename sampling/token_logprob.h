// defines: TokenLogprob (an emitted token's log-probability and the most probable tokens of
// the same distribution), LogprobSource (which distribution: the target's raw softmax, or the
// sampler's processed one) and token_logprob, the one function that computes them.
//
//   raw        log softmax(logits): x - (max + log sum exp(x - max)), the sum in double in
//              token order; the target's distribution before any transform.
//   processed  log p for the distribution the strategy draws from (Sampler::distribution):
//              after temperature, top-k, top-p and min-p; -inf outside the kept set, and the
//              alternatives only from inside it. Greedy's is one-hot: 0 for the argmax.
// Alternatives are ordered by probability, ties by lower token id. Both read only one row,
// so a token's log-probabilities are the same bits whichever forward gave the row (plain
// decoding, a verify tree, a prefill chunk: batch invariance).
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "base/enum_names.h"

namespace specula {

enum class LogprobSource { kRaw, kProcessed };

inline std::span<const EnumName<LogprobSource>> enum_names(LogprobSource) {
  static constexpr EnumName<LogprobSource> kNames[] = {{LogprobSource::kRaw, "raw"},
                                                       {LogprobSource::kProcessed, "processed"}};
  return kNames;
}

// The most alternatives a request may ask for (OpenAI's top_logprobs bound).
inline constexpr int kMaxLogprobs = 20;

struct TokenLogprob {
  int token = -1;
  double logprob = 0;
  std::vector<std::pair<int, double>> top;  // [<= top_n] (token, logprob), most probable first
};

// row: in [vocab] — the logits (kRaw) or the sampler's distribution (kProcessed).
// token in [0, vocab); top_n in [0, kMaxLogprobs].
TokenLogprob token_logprob(LogprobSource source, std::span<const float> row, int token, int top_n);

}  // namespace specula
