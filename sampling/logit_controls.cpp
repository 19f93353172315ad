#include "sampling/logit_controls.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "base/error.h"

namespace specula {
namespace {

bool in_vocab(int token, std::size_t vocab) { return token >= 0 && static_cast<std::size_t>(token) < vocab; }

// Hugging Face's no-repeat rule over `seq`: every token that follows an earlier occurrence of
// the sequence's last n - 1 tokens.
template <typename T>
void ban_repeated_ngrams(std::span<const int> seq, int n, std::span<T> logits) {
  const std::size_t len = seq.size(), k = static_cast<std::size_t>(n - 1);
  if (len + 1 < static_cast<std::size_t>(n)) return;
  const std::span<const int> tail = seq.last(k);
  for (std::size_t i = 0; i + k < len; ++i)
    if (std::equal(tail.begin(), tail.end(), seq.begin() + static_cast<std::ptrdiff_t>(i)) &&
        in_vocab(seq[i + k], logits.size()))
      logits[static_cast<std::size_t>(seq[i + k])] = -std::numeric_limits<T>::infinity();
}

template <typename T>
void edit(const LogitControls& c, const ControlHistory& h, std::span<T> logits) {
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  const std::size_t vocab = logits.size();
  if (c.repetition_penalty != 1.0f) {
    const T r = c.repetition_penalty;
    std::vector<bool> seen(vocab, false);
    for (std::span<const int> part : {h.prompt, h.generated, h.path})
      for (int t : part)
        if (in_vocab(t, vocab)) seen[static_cast<std::size_t>(t)] = true;
    for (std::size_t t = 0; t < vocab; ++t)
      if (seen[t]) logits[t] = logits[t] < 0 ? logits[t] * r : logits[t] / r;
  }
  if (c.frequency_penalty != 0.0f || c.presence_penalty != 0.0f) {
    std::vector<int> count(vocab, 0);
    for (std::span<const int> part : {h.generated, h.path})
      for (int t : part)
        if (in_vocab(t, vocab)) ++count[static_cast<std::size_t>(t)];
    for (std::size_t t = 0; t < vocab; ++t)
      if (count[t] > 0) logits[t] -= T(c.frequency_penalty) * static_cast<T>(count[t]) + T(c.presence_penalty);
  }
  if (c.no_repeat_ngram_size > 0) {
    std::vector<int> seq(h.prompt.begin(), h.prompt.end());
    seq.insert(seq.end(), h.generated.begin(), h.generated.end());
    seq.insert(seq.end(), h.path.begin(), h.path.end());
    ban_repeated_ngrams(seq, c.no_repeat_ngram_size, logits);
  }
  for (const auto& [token, bias] : c.logit_bias)
    if (in_vocab(token, vocab)) logits[static_cast<std::size_t>(token)] += T(bias);
  for (int token : c.banned_tokens)
    if (in_vocab(token, vocab)) logits[static_cast<std::size_t>(token)] = kMinusInf;
  if (h.generated.size() + h.path.size() < static_cast<std::size_t>(c.min_new_tokens))
    for (int eos : h.eos_ids)
      if (in_vocab(eos, vocab)) logits[static_cast<std::size_t>(eos)] = kMinusInf;
}

}  // namespace

bool LogitControls::active() const { return !first_active_control(*this).empty(); }

std::string_view first_active_control(const LogitControls& c) {
  if (c.repetition_penalty != 1.0f) return "sampling.repetition_penalty";
  if (c.frequency_penalty != 0.0f) return "sampling.frequency_penalty";
  if (c.presence_penalty != 0.0f) return "sampling.presence_penalty";
  if (c.no_repeat_ngram_size > 0) return "sampling.no_repeat_ngram_size";
  if (!c.logit_bias.empty()) return "sampling.logit_bias";
  if (!c.banned_tokens.empty()) return "sampling.banned_tokens";
  if (c.min_new_tokens > 0) return "sampling.min_new_tokens";
  return "";
}

void apply_controls(const LogitControls& c, const ControlHistory& h, std::span<float> logits) { edit(c, h, logits); }
void apply_controls(const LogitControls& c, const ControlHistory& h, std::span<double> logits) { edit(c, h, logits); }

void RowControls::apply(std::span<const int> tokens, std::span<const int> path, std::span<float> row) const {
  if (!active()) return;
  const std::size_t prompt = std::min(prompt_len, tokens.size());
  apply_controls(*controls, {tokens.first(prompt), tokens.subspan(prompt), path, eos_ids}, row);
}

std::span<const float> RowControls::edited(std::span<const float> logits, std::span<const int> tokens,
                                           std::span<const int> path, std::vector<float>& scratch) const {
  if (!active()) return logits;
  scratch.assign(logits.begin(), logits.end());
  apply(tokens, path, scratch);
  return scratch;
}

void validate_logit_controls(const LogitControls& c, int vocab, const OptionNames& names) {
  SPECULA_CHECK(c.repetition_penalty > 0.0f && std::isfinite(c.repetition_penalty),
                names.at("sampling.repetition_penalty"), " must be > 0 and finite, got ", c.repetition_penalty);
  SPECULA_CHECK(c.frequency_penalty >= -2.0f && c.frequency_penalty <= 2.0f, names.at("sampling.frequency_penalty"),
                " must be in [-2, 2], got ", c.frequency_penalty);
  SPECULA_CHECK(c.presence_penalty >= -2.0f && c.presence_penalty <= 2.0f, names.at("sampling.presence_penalty"),
                " must be in [-2, 2], got ", c.presence_penalty);
  SPECULA_CHECK(c.no_repeat_ngram_size >= 0, names.at("sampling.no_repeat_ngram_size"), " must be >= 0, got ",
                c.no_repeat_ngram_size);
  SPECULA_CHECK(c.min_new_tokens >= 0, names.at("sampling.min_new_tokens"), " must be >= 0, got ", c.min_new_tokens);
  std::set<int> biased;
  for (const auto& [token, bias] : c.logit_bias) {
    SPECULA_CHECK(token >= 0 && token < vocab, names.at("sampling.logit_bias"), ": token ", token,
                  " is outside the vocabulary [0, ", vocab, ")");
    SPECULA_CHECK(std::isfinite(bias), names.at("sampling.logit_bias"), ": token ", token, " has bias ", bias,
                  "; it must be finite");
    SPECULA_CHECK(biased.insert(token).second, names.at("sampling.logit_bias"), ": token ", token, " is biased twice");
  }
  for (int token : c.banned_tokens)
    SPECULA_CHECK(token >= 0 && token < vocab, names.at("sampling.banned_tokens"), ": token ", token,
                  " is outside the vocabulary [0, ", vocab, ")");
  const std::set<int> banned(c.banned_tokens.begin(), c.banned_tokens.end());
  SPECULA_CHECK(static_cast<long long>(banned.size()) < vocab, names.at("sampling.banned_tokens"),
                " bans every token of the vocabulary (", vocab, "): nothing is left to generate");
}

}  // namespace specula
