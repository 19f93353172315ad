#include "tests/test_format_support.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "runtime/generate.h"
#include "tests/test_engine_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"

namespace specula::test {

float from_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

float bf16_value(uint16_t b) { return from_bits(uint32_t(b) << 16); }

RandomWeights::RandomWeights(DType dtype, int out, int in, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const std::size_t count = static_cast<std::size_t>(out) * in, es = dtype_size(dtype);
  storage.resize(count * es);
  values.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    float v = normal(rng) * std::pow(10.0f, -2.0f + 4.0f * unit(rng));
    if (unit(rng) < 0.02f) v = from_bits(0x00200000u | (unit(rng) < 0.5f ? 0x80000000u : 0u));  // BF16 subnormal
    if (dtype == DType::BF16) v = bf16_value(bf16_nearest_even(v));
    store_value(v, dtype, storage.data() + i * es);
    values[i] = v;
  }
  view = TensorView{"test.weight", dtype, {out, in}, storage.data(), "memory"};
}

std::vector<float> random_rows(int n, int in, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n) * in);
  for (float& v : x) v = unit(rng) < 0.01f ? from_bits(0x00012345u) : normal(rng) * (unit(rng) < 0.02f ? 20.0f : 1.0f);
  return x;
}

FormatDifference logits_against_stored(const Backend& stored, const Backend& converted) {
  Engine a(stored, 16, 16), b(converted, 16, 16);
  const int vocab = stored.config().vocab_size;
  FormatDifference d;
  const auto prompts = reference_prompts();
  for (std::size_t p = 0; p < (kSanitized ? 1u : 3u); ++p) {
    const std::vector<int> tokens(prompts[p].begin(), prompts[p].begin() + std::min<std::size_t>(prompts[p].size(), 48));
    std::vector<int> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> la(tokens.size() * vocab), lb(la.size());
    const int sa = a.cache.create(), sb = b.cache.create();
    a.forward(sa, {tokens, positions, {}, true}, la);
    b.forward(sb, {tokens, positions, {}, true}, lb);
    a.cache.free(sa);
    b.cache.free(sb);
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      const float* ra = la.data() + r * vocab;
      const float* rb = lb.data() + r * vocab;
      for (int v = 0; v < vocab; ++v) {
        d.max_diff = std::max(d.max_diff, double(std::fabs(ra[v] - rb[v])));
        d.max_logit = std::max(d.max_logit, double(std::fabs(ra[v])));
      }
      ++d.rows;
      d.agree += std::max_element(ra, ra + vocab) - ra == std::max_element(rb, rb + vocab) - rb;
    }
  }
  return d;
}

void check_close_to_stored(const std::string& model, const Backend& stored, const Backend& converted,
                           double max_relative, double min_agreement) {
  const FormatDifference d = logits_against_stored(stored, converted);
  INFO(model << ": max |logit difference| " << d.max_diff << " (max |logit| " << d.max_logit << "), top-1 agreement "
             << d.agree << "/" << d.rows);
  CHECK(d.max_diff <= max_relative * d.max_logit);
  CHECK(d.agree >= min_agreement * d.rows);
}

void check_greedy_speculation(MatrixFormat format, std::span<const DraftOptions> drafts) {
  const auto prompts = reference_prompts();
  for (std::size_t p = 0; p < (kSanitized ? 1u : prompts.size()); p += 4) {
    GenerateOptions plain;
    plain.model_dir = model_dir("target-16m");
    plain.weights = format;
    plain.prompt_ids = prompts[p];
    plain.max_new_tokens = kSanitized ? 24 : 32;
    const auto expected = generate(store(), plain)["ids"];
    for (const DraftOptions& d : drafts) {
      INFO("prompt " << p << ", draft " << name_of(d.method) << " " << d.model_dir << " weights " << weights_name(d.weights));
      GenerateOptions spec = plain;
      spec.draft = d;
      const auto result = generate(store(), spec);
      CHECK(result["ids"] == expected);
      CHECK(result["stats"]["accepted"].get<long>() > 0);
    }
  }
}

std::vector<DraftOptions> drafts_in_format(MatrixFormat format) {
  DraftOptions in_format = model_draft("draft-4m", 4, {}, 0, false);
  in_format.weights = format;
  DraftOptions ngram;
  ngram.method = DraftMethod::kNgram;
  ngram.gamma = 3;
  return {in_format, model_draft("draft-1m", 3, {}, 0, false), ngram};
}

}  // namespace specula::test
