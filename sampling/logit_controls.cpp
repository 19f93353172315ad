#include "sampling/logit_controls.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "base/error.h"

namespace specula {
namespace {

bool in_vocab(int token, int vocab) { return token >= 0 && token < vocab; }

// Hugging Face's no-repeat rule over `seq`: calls mask(t) for every token t that follows an
// earlier occurrence of the sequence's last n - 1 tokens.
template <typename Mask>
void repeated_ngram_tokens(std::span<const int> seq, int n, Mask mask) {
  const std::size_t len = seq.size(), k = static_cast<std::size_t>(n - 1);
  if (len + 1 < static_cast<std::size_t>(n)) return;
  const std::span<const int> tail = seq.last(k);
  for (std::size_t i = 0; i + k < len; ++i)
    if (std::equal(tail.begin(), tail.end(), seq.begin() + static_cast<std::ptrdiff_t>(i))) mask(seq[i + k]);
}

template <typename T>
T edited(const LogitControls& c, const TokenEdit& e, T x) {
  if (e.masked) return -std::numeric_limits<T>::infinity();
  if (e.repeated) {
    const T r = c.repetition_penalty;
    x = x < 0 ? x * r : x / r;
  }
  if (e.count > 0) x -= T(c.frequency_penalty) * static_cast<T>(e.count) + T(c.presence_penalty);
  if (e.biased) x += T(e.bias);
  return x;
}

template <typename T>
void edit(const LogitControls& c, const ControlHistory& h, std::span<T> logits) {
  std::vector<TokenEdit> edits;
  control_edits(c, h, static_cast<int>(logits.size()), edits);
  for (const TokenEdit& e : edits) {
    T& x = logits[static_cast<std::size_t>(e.token)];
    x = edited(c, e, x);
  }
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

void control_edits(const LogitControls& c, const ControlHistory& h, int vocab, std::vector<TokenEdit>& edits) {
  // One entry per touch, then sorted by token and merged (the merge is order-free: a token is
  // biased once).
  edits.clear();
  const auto touch = [&](int token) -> TokenEdit* {
    if (!in_vocab(token, vocab)) return nullptr;
    edits.push_back(TokenEdit{token});
    return &edits.back();
  };
  if (c.repetition_penalty != 1.0f)
    for (std::span<const int> part : {h.prompt, h.generated, h.path})
      for (int t : part)
        if (TokenEdit* e = touch(t)) e->repeated = true;
  if (c.frequency_penalty != 0.0f || c.presence_penalty != 0.0f)
    for (std::span<const int> part : {h.generated, h.path})
      for (int t : part)
        if (TokenEdit* e = touch(t)) e->count = 1;
  if (c.no_repeat_ngram_size > 0) {
    std::vector<int> seq(h.prompt.begin(), h.prompt.end());
    seq.insert(seq.end(), h.generated.begin(), h.generated.end());
    seq.insert(seq.end(), h.path.begin(), h.path.end());
    repeated_ngram_tokens(seq, c.no_repeat_ngram_size, [&](int t) {
      if (TokenEdit* e = touch(t)) e->masked = true;
    });
  }
  for (const auto& [token, bias] : c.logit_bias)
    if (TokenEdit* e = touch(token)) e->biased = true, e->bias = bias;
  for (int token : c.banned_tokens)
    if (TokenEdit* e = touch(token)) e->masked = true;
  if (h.generated.size() + h.path.size() < static_cast<std::size_t>(c.min_new_tokens))
    for (int eos : h.eos_ids)
      if (TokenEdit* e = touch(eos)) e->masked = true;
  std::sort(edits.begin(), edits.end(), [](const TokenEdit& a, const TokenEdit& b) { return a.token < b.token; });
  std::size_t kept = 0;
  for (const TokenEdit& e : edits) {
    if (kept > 0 && edits[kept - 1].token == e.token) {
      TokenEdit& m = edits[kept - 1];
      m.count += e.count;
      m.repeated = m.repeated || e.repeated;
      m.masked = m.masked || e.masked;
      if (e.biased) m.biased = true, m.bias = e.bias;
    } else {
      edits[kept++] = e;
    }
  }
  edits.resize(kept);
}

float edited_logit(const LogitControls& c, const TokenEdit& e, float x) { return edited(c, e, x); }
double edited_logit(const LogitControls& c, const TokenEdit& e, double x) { return edited(c, e, x); }

void apply_controls(const LogitControls& c, const ControlHistory& h, std::span<float> logits) { edit(c, h, logits); }
void apply_controls(const LogitControls& c, const ControlHistory& h, std::span<double> logits) { edit(c, h, logits); }

void RowControls::apply(std::span<const int> tokens, std::span<const int> path, std::span<float> row) const {
  if (!active()) return;
  const std::size_t prompt = std::min(prompt_len, tokens.size());
  apply_controls(*controls, {tokens.first(prompt), tokens.subspan(prompt), path, eos_ids}, row);
}

void RowControls::edits(std::span<const int> tokens, std::span<const int> path, int vocab,
                        std::vector<TokenEdit>& out) const {
  out.clear();
  if (!active()) return;
  const std::size_t prompt = std::min(prompt_len, tokens.size());
  control_edits(*controls, {tokens.first(prompt), tokens.subspan(prompt), path, eos_ids}, vocab, out);
}

void RowControls::path_edits(std::span<const int> tokens, int vocab, PathEdits& out) const {
  SPECULA_CHECK(active() && controls->no_repeat_ngram_size == 0,
                "logit controls: a device drawing the path takes active controls without no_repeat_ngram_size");
  const std::size_t prompt = std::min(prompt_len, tokens.size());
  // Without EOS ids, min_new_tokens masks nothing: the device masks them over the path.
  control_edits(*controls, {tokens.first(prompt), tokens.subspan(prompt), {}, {}}, vocab, out.edits);
  out.eos_ids = eos_ids;
  out.eos_until = controls->min_new_tokens - static_cast<int>(tokens.size() - prompt);
  out.repetition = controls->repetition_penalty;
  out.frequency = controls->frequency_penalty;
  out.presence = controls->presence_penalty;
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
