// defines: the checks the opt-in matrix formats (int8, bf16dot) share: logits_against_stored
// (a model's logits in a format against the same model as stored, over the reference
// prompts' rows) and check_greedy_speculation (greedy speculative decoding with a target in a
// format equals plain greedy decoding with it, for each drafter).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "base/dtype.h"
#include "engine/backend.h"
#include "draft/draft_options.h"

namespace specula::test {

struct FormatDifference {
  double max_diff = 0;   // max |logit in the format - logit as stored| over rows and vocab
  double max_logit = 0;  // max |logit as stored|
  int rows = 0, agree = 0;  // rows compared, rows whose argmax agrees
};

// All rows of the first 48 tokens of 3 reference prompts (1 in the sanitized build), on one
// model's backend as stored and its backend in a format.
FormatDifference logits_against_stored(const Backend& stored, const Backend& converted);

// logits_against_stored's figures within bounds: max |difference| <= max_relative * max
// |logit as stored|, and argmax agreement on at least min_agreement of the rows.
void check_close_to_stored(const std::string& model, const Backend& stored, const Backend& converted,
                           double max_relative, double min_agreement);

// target-16m in `format` on every 4th reference prompt (the first only, sanitized), 32 new
// tokens (24): each drafter's ids equal plain greedy decoding's, and it accepts something.
void check_greedy_speculation(DType format, std::span<const DraftOptions> drafts);

}  // namespace specula::test
