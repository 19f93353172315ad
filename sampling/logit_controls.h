// defines: LogitControls, the history-dependent edits of one row of target (or draft) logits
// before the sampler's transforms, ControlHistory (the tokens they read: the prompt, the tokens
// generated so far and, under speculation, the drafted path to the row's node), apply_controls
// and validate_logit_controls.
//
// In this order, each over the row's own history (prompt + generated + path):
//   repetition   Hugging Face's repetition_penalty r > 0: a token present in prompt, generated
//                or path has its logit x multiplied by r when x < 0, divided by r otherwise.
//   frequency,   OpenAI's: x -= frequency * c + presence * (c > 0), c the token's count in
//   presence     generated + path (the prompt does not count).
//   no-repeat    Hugging Face's no_repeat_ngram_size n: a token that would complete an n-gram
//                already present in prompt + generated + path gets -inf.
//   bias         x += logit_bias[token].
//   banned       x = -inf for every banned token.
//   min tokens   while generated + path holds fewer than min_new_tokens tokens, every EOS id
//                gets -inf.
// The sampler (temperature, top-k, top-p, min-p, or greedy) then reads the edited row; beam
// search (sampling/beam_search.h) edits each live beam's row of log-probabilities instead,
// over prompt + that beam's own tokens.
//
// Why speculation stays exact: a tree node's target row is the target's next-token logits
// after the node's own path, so its controls read that path's tokens (ControlHistory::path),
// never only the committed prefix; the verifier then sees, at every node, the very distribution
// plain decoding would sample from after the same tokens. The draft's rows are edited over the
// same paths, which keeps q close to p; verification is exact for any q it is given.
//
//   LogitControls c;
//   c.presence_penalty = 0.5f;
//   c.banned_tokens = {13};
//   validate_logit_controls(c, vocab, {});                   // once, before decoding
//   std::vector<float> row(logits.begin(), logits.end());
//   apply_controls(c, {prompt, generated, path, eos_ids}, row);
//   sampler.distribution(row, probs);
#pragma once

#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/option_names.h"

namespace specula {

struct LogitControls {
  float repetition_penalty = 1.0f;            // > 0; 1 = off
  float frequency_penalty = 0.0f;             // in [-2, 2]; 0 = off
  float presence_penalty = 0.0f;              // in [-2, 2]; 0 = off
  int no_repeat_ngram_size = 0;               // >= 0; 0 = off
  std::vector<std::pair<int, float>> logit_bias;  // (token, added value), tokens distinct
  std::vector<int> banned_tokens;
  int min_new_tokens = 0;                     // >= 0

  // True when any control would edit a row.
  bool active() const;
};

// The key of the first control set (in the order above), "" when none is.
std::string_view first_active_control(const LogitControls& controls);

// The tokens a row's controls read. generated + path are the tokens after the prompt, the
// path ending at the row's node (empty for a plain step or a tree's root row).
struct ControlHistory {
  std::span<const int> prompt;
  std::span<const int> generated;
  std::span<const int> path;
  std::span<const int> eos_ids;
};

// What the controls do to one token of one row, in the order above: x becomes -inf where
// masked; else x / r (x >= 0) or x * r (x < 0) where repeated, r the repetition penalty; then
// x - (frequency * count + presence) where count > 0; then x + bias where biased. A plain
// struct of fixed layout: the CUDA backend applies the same edits on its device
// (engine/device_verify.h).
struct TokenEdit {
  int token = 0;
  int count = 0;          // occurrences in generated + path where a frequency or presence penalty is set, else 0
  bool repeated = false;  // present in prompt + generated + path, where a repetition penalty is set
  bool masked = false;    // a repeated n-gram's completion, a banned token, an EOS before min_new_tokens
  bool biased = false;
  float bias = 0;         // logit_bias's value where biased
};

// Every token the controls edit in the row after `history`, ascending by token (tokens of the
// history outside [0, vocab) are ignored): no token outside the list changes.
void control_edits(const LogitControls& controls, const ControlHistory& history, int vocab,
                   std::vector<TokenEdit>& edits);

// x after `edit` (in the row's own precision).
float edited_logit(const LogitControls& controls, const TokenEdit& edit, float x);
double edited_logit(const LogitControls& controls, const TokenEdit& edit, double x);

// Edits `logits` (one row, [vocab]) in the order above, in the row's own precision (beam
// search edits rows of log-probabilities in double): control_edits, each through edited_logit.
void apply_controls(const LogitControls& controls, const ControlHistory& history, std::span<float> logits);
void apply_controls(const LogitControls& controls, const ControlHistory& history, std::span<double> logits);

// A row's controls split for a device that draws the row's path itself
// (RowControls::path_edits): `edits` are control_edits over prompt + generated with no path and
// no min_new_tokens. The device then merges in each distinct token t of the row's path (those
// outside the vocabulary skipped): t's edit there (or a new one) becomes repeated where
// repetition != 1 and gains t's occurrences in the path as count where frequency or presence
// != 0; and every EOS id gets -inf while the path holds fewer than eos_until tokens. The row is
// then what apply() makes of it over the same path, bit for bit.
struct PathEdits {
  std::vector<TokenEdit> edits;  // ascending by token
  std::span<const int> eos_ids;
  int eos_until = 0;             // min_new_tokens - generated tokens (<= 0: no EOS mask)
  float repetition = 1, frequency = 0, presence = 0;
};

// A request's controls bound to its sequence: the prompt's length within the sequence's tokens
// and the model's EOS ids. Decoders hold one per sequence and edit each row through it.
struct RowControls {
  const LogitControls* controls = nullptr;  // nullptr or inactive: rows stay as they are
  std::size_t prompt_len = 0;
  std::span<const int> eos_ids;

  bool active() const { return controls != nullptr && controls->active(); }
  // Edits `row` ([vocab]), the logits after `tokens` (prompt + generated) and then `path`.
  void apply(std::span<const int> tokens, std::span<const int> path, std::span<float> row) const;
  // The edits apply() makes to a row of `vocab` logits (none when inactive).
  void edits(std::span<const int> tokens, std::span<const int> path, int vocab, std::vector<TokenEdit>& out) const;
  // Whether a device that draws the rows' paths can edit them (path_edits): inactive controls,
  // or active ones without no_repeat_ngram_size, which reads the path's n-grams.
  bool paths_on_device() const { return !active() || controls->no_repeat_ngram_size == 0; }
  // The split of the edits of the rows after `tokens` and a path the device draws (active
  // controls that paths_on_device: else SpeculaError).
  void path_edits(std::span<const int> tokens, int vocab, PathEdits& out) const;
  // `logits` as the sampler reads them: themselves when inactive, else their edit in `scratch`.
  std::span<const float> edited(std::span<const float> logits, std::span<const int> tokens,
                                std::span<const int> path, std::vector<float>& scratch) const;
};

// Throws SpeculaError naming the key (through `names`, keys sampling.*) and the value: a
// repetition penalty <= 0 or not finite, a frequency or presence penalty outside [-2, 2], a
// negative no-repeat size or min_new_tokens, a bias or banned token outside [0, vocab), a bias
// value not finite, a token biased twice, bans of the whole vocabulary.
void validate_logit_controls(const LogitControls& controls, int vocab, const OptionNames& names);

}  // namespace specula
