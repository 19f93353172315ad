// cpu::attend_group on every instruction set this CPU runs (vectorised: 4 keys per dot-product group, several query heads per pass
// over the values, register-accumulated weighted sums) against a plain double-precision softmax
// attention per head, over head sizes with and without a tail past the last 8 lanes, key
// counts that do and do not fill the groups of four, and 1-5 query heads per key/value head
// (every head-block remainder). Each head's output must also be bitwise the same whether it is
// computed alone or in its group (what batch invariance needs).
//
// Error bound: scores are f32 dot products (relative error ~ head_dim * 2^-24 of sum |q k|),
// the softmax and the weighted sum add ~num_keys * 2^-24 relative error of sum |p v| <= max|v|;
// with the unit-normal inputs used here 2e-5 * max|v| covers both with a wide margin, while a
// dropped key, a misplaced lane or a wrong scale moves the output by ~1e-2 or more.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"

namespace specula {
namespace {

// out[d] = sum_j softmax_j(scale * q . k_j) v_j[d], all in double.
std::vector<double> attend_reference(const std::vector<float>& q, const std::vector<std::vector<float>>& keys,
                                     const std::vector<std::vector<float>>& values, int head_offset, float scale) {
  const std::size_t head_dim = q.size();
  std::vector<double> score(keys.size());
  double max_score = -INFINITY;
  for (std::size_t j = 0; j < keys.size(); ++j) {
    double s = 0;
    for (std::size_t d = 0; d < head_dim; ++d) s += double(q[d]) * keys[j][head_offset + d];
    score[j] = s * scale;
    max_score = std::max(max_score, score[j]);
  }
  double total = 0;
  for (double& s : score) total += (s = std::exp(s - max_score));
  std::vector<double> out(head_dim, 0.0);
  for (std::size_t j = 0; j < keys.size(); ++j)
    for (std::size_t d = 0; d < head_dim; ++d) out[d] += score[j] / total * values[j][head_offset + d];
  return out;
}

}  // namespace

TEST_CASE("attend_group equals double-precision softmax attention, head by head", "[engine][attention]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (cpu::MatmulIsa isa : cpu::supported_matmul_isas())
  for (int head_dim : {8, 13, 16, 64, 128}) {
    const int kv_offset = head_dim;  // the second head of a two-head cache row
    const int kv_dim = 2 * head_dim;
    for (int num_keys : {1, 3, 4, 5, 17, 300}) {
      for (int num_heads : {1, 2, 3, 5}) {
        INFO(cpu::isa_name(isa) << " head_dim=" << head_dim << " num_keys=" << num_keys << " num_heads=" << num_heads);
        std::vector<float> q(static_cast<std::size_t>(num_heads * head_dim));
        for (float& v : q) v = normal(rng);
        std::vector<std::vector<float>> keys(num_keys, std::vector<float>(kv_dim)), values = keys;
        std::vector<const float*> key_rows, value_rows;
        float max_value = 0;
        for (int j = 0; j < num_keys; ++j) {
          for (float& v : keys[j]) v = normal(rng);
          for (float& v : values[j]) max_value = std::max(max_value, std::abs(v = normal(rng)));
          key_rows.push_back(keys[j].data());
          value_rows.push_back(values[j].data());
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> scores(static_cast<std::size_t>(num_heads * num_keys)), out(q.size());
        cpu::attend_group(isa, q.data(), num_heads, key_rows.data(), value_rows.data(), num_keys, kv_offset, head_dim,
                          scale, scores.data(), out.data());
        for (int h = 0; h < num_heads; ++h) {
          const std::vector<float> qh(q.begin() + h * head_dim, q.begin() + (h + 1) * head_dim);
          const auto ref = attend_reference(qh, keys, values, kv_offset, scale);
          double worst = 0;
          for (int d = 0; d < head_dim; ++d) worst = std::max(worst, std::abs(out[h * head_dim + d] - ref[d]));
          CHECK(worst <= 2e-5 * max_value);

          std::vector<float> alone(static_cast<std::size_t>(head_dim));
          cpu::attend_group(isa, qh.data(), 1, key_rows.data(), value_rows.data(), num_keys, kv_offset, head_dim, scale,
                            scores.data(), alone.data());
          CHECK(std::memcmp(alone.data(), &out[static_cast<std::size_t>(h) * head_dim], sizeof(float) * head_dim) == 0);
        }
      }
    }
  }
}

}  // namespace specula
