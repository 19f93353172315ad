// defines: the checks the opt-in matrix formats (int8, bf16dot, bf16amx) share: random operands
// for the BF16 products (RandomWeights, random_rows), logits_against_stored
// (a model's logits in a format against the same model as stored, over the reference
// prompts' rows) and check_greedy_speculation (greedy speculative decoding with a target in a
// format equals plain greedy decoding with it, for each drafter).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "engine/backend.h"
#include "draft/draft_options.h"
#include "model/safetensors.h"

namespace specula::test {

float from_bits(uint32_t bits);
float bf16_value(uint16_t b);  // a BF16 value's f32

// Weights [out, in] stored as F32 or BF16: normal values of magnitudes 1e-2 to 1e2 and a few
// subnormals (BF16's and, for F32, also F32's), which the BF16 products read as zero.
struct RandomWeights {
  std::vector<unsigned char> storage;
  std::vector<float> values;  // the stored values as f32, [out, in]
  TensorView view;            // over storage

  RandomWeights(DType dtype, int out, int in, std::mt19937& rng);
  RandomWeights(const RandomWeights&) = delete;  // view points into storage
};

// n rows of in activations: normal, 2% of them 20x larger, 1% an f32 subnormal.
std::vector<float> random_rows(int n, int in, std::mt19937& rng);

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
void check_greedy_speculation(MatrixFormat format, std::span<const DraftOptions> drafts);

// The drafters the BF16 formats' check uses: a draft-4m chain of 4 read in `format`, a
// draft-1m chain of 3 as stored and n-grams of 3.
std::vector<DraftOptions> drafts_in_format(MatrixFormat format);

}  // namespace specula::test
