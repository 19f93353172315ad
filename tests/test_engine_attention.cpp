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
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/batch.h"
#include "engine/cpu/matmul.h"
#include "kv/kv_cache.h"

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

// Pages of one layer laid out as kv/page_storage.h lays them out ([num_blocks, 2, block_size,
// kv_dim]), the sequence's blocks in a shuffled order, holding slot_keys / slot_values.
struct Pages {
  int block_size, kv_dim;
  std::vector<int> table;  // block of each block-table entry
  std::vector<float> data;

  Pages(const std::vector<std::vector<float>>& keys, const std::vector<std::vector<float>>& values, int block_size,
        std::mt19937& rng)
      : block_size(block_size), kv_dim(static_cast<int>(keys[0].size())) {
    const int blocks = (static_cast<int>(keys.size()) + block_size - 1) / block_size;
    for (int b = 0; b < blocks; ++b) table.push_back(b);
    std::shuffle(table.begin(), table.end(), rng);
    data.assign(static_cast<std::size_t>(blocks) * block_stride(), std::nanf(""));
    for (std::size_t slot = 0; slot < keys.size(); ++slot) {
      std::copy(keys[slot].begin(), keys[slot].end(), row(static_cast<int>(slot), 0));
      std::copy(values[slot].begin(), values[slot].end(), row(static_cast<int>(slot), 1));
    }
  }
  std::size_t block_stride() const { return 2 * std::size_t(block_size) * kv_dim; }
  float* row(int slot, int kv) {
    return data.data() + table[slot / block_size] * block_stride() + (kv * block_size + slot % block_size) * std::size_t(kv_dim);
  }
  cpu::PagedRows rows(int kv, int prefix_len, const std::vector<int>& extra) const {
    return {data.data() + kv * std::size_t(block_size) * kv_dim, block_stride(), kv_dim, block_size, table.data(),
            prefix_len, extra.data(), static_cast<int>(extra.size())};
  }
};

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
        // The row sees a prefix of the sequence's slots and then every other later slot (a tree
        // row's ancestors), num_keys in all.
        const int prefix_len = num_keys / 2;
        const int slots = prefix_len + 2 * (num_keys - prefix_len) + 1;
        std::vector<std::vector<float>> slot_keys(slots, std::vector<float>(kv_dim)), slot_values = slot_keys;
        float max_value = 0;
        for (int j = 0; j < slots; ++j) {
          for (float& v : slot_keys[j]) v = normal(rng);
          for (float& v : slot_values[j]) max_value = std::max(max_value, std::abs(v = normal(rng)));
        }
        std::vector<int> extra;
        for (int slot = prefix_len; static_cast<int>(extra.size()) < num_keys - prefix_len; slot += 2) extra.push_back(slot);
        std::vector<std::vector<float>> keys(slot_keys.begin(), slot_keys.begin() + prefix_len), values(slot_values.begin(), slot_values.begin() + prefix_len);
        for (int slot : extra) {
          keys.push_back(slot_keys[slot]);
          values.push_back(slot_values[slot]);
        }
        for (int block_size : {1, 5, 16}) {
          INFO("block size " << block_size);
          const Pages pages(slot_keys, slot_values, block_size, rng);
          const cpu::PagedRows key_rows = pages.rows(0, prefix_len, extra), value_rows = pages.rows(1, prefix_len, extra);
          REQUIRE(key_rows.num_keys() == num_keys);
          const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
          std::vector<float> scores(static_cast<std::size_t>(num_heads * num_keys)), out(q.size());
          cpu::attend_group(isa, q.data(), num_heads, key_rows, value_rows, kv_offset, head_dim, scale, scores.data(),
                            out.data());
          for (int h = 0; h < num_heads; ++h) {
            const std::vector<float> qh(q.begin() + h * head_dim, q.begin() + (h + 1) * head_dim);
            const auto ref = attend_reference(qh, keys, values, kv_offset, scale);
            double worst = 0;
            bool finite = true;  // padding past the last slot is NaN: reading it must show
            for (int d = 0; d < head_dim; ++d) {
              const double error = std::abs(out[h * head_dim + d] - ref[d]);
              finite = finite && std::isfinite(error);
              worst = std::max(worst, error);
            }
            CHECK(finite);
            CHECK(worst <= 2e-5 * max_value);

            std::vector<float> alone(static_cast<std::size_t>(head_dim));
            cpu::attend_group(isa, qh.data(), 1, key_rows, value_rows, kv_offset, head_dim, scale, scores.data(),
                              alone.data());
            CHECK(std::memcmp(alone.data(), &out[static_cast<std::size_t>(h) * head_dim], sizeof(float) * head_dim) == 0);
          }
        }
      }
    }
  }
}

}  // namespace specula

namespace specula {

// The launcher over a ragged batch against its plain double-precision reference: three
// sequences in a shuffled pool (a causal chunk, a one-shot tree, a tree's second level over
// cached first-level nodes), every row and head, on each instruction set; random pages.
TEST_CASE("attend_batch equals attend_batch_reference over a mixed batch", "[engine][attention]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ModelConfig config;
  config.vocab_size = 16;
  config.max_position_embeddings = 512;
  const cpu::AttentionShape shape{6, 2, 16};
  for (cpu::MatmulIsa isa : cpu::supported_matmul_isas()) {
    INFO(cpu::isa_name(isa));
    KvCache cache(KvLayout{1, shape.num_kv_heads, shape.head_dim, 5, KvDType::kF32}, 64);
    const int a = cache.create(), b = cache.create(), c = cache.create();
    cache.append_slots(a, 37);
    cache.append_slots(b, 12);
    cache.append_slots(c, 20);  // the last 3 are c's tree's first level
    const std::vector<int> chunk(4, 1), chunk_pos = {37, 38, 39, 40};
    const std::vector<int> tree(5, 1), tree_pos = {12, 13, 13, 14, 12}, tree_parents = {-1, 0, 0, 2, -1};
    const std::vector<int> level(2, 1), level_pos = {19, 20}, level_parents = {-1, 0, 0, 1, 2};
    const std::vector<SequenceRows> parts = {{a, chunk, chunk_pos, {}, RowLogits::kAll},
                                             {b, tree, tree_pos, tree_parents, RowLogits::kAll},
                                             {c, level, level_pos, level_parents, RowLogits::kAll}};
    const RaggedBatch batch = plan_batch(parts, cache.tables(), config);
    const KvPlan plan = cache.prepare(batch.seqs, batch.rows_per_seq());
    PageStorage& pages = cache.storage();
    float max_value = 0;
    for (int block = 0; block < pages.num_blocks(); ++block)
      for (int kv = 0; kv < 2; ++kv)
        for (int row = 0; row < 5; ++row)
          for (int d = 0; d < pages.layout().kv_dim(); ++d) {
            const float v = normal(rng);
            pages.row(0, kv, block * 5 + row)[d] = v;
            if (kv == 1) max_value = std::max(max_value, std::abs(v));
          }
    const std::size_t width = static_cast<std::size_t>(shape.num_heads * shape.head_dim);
    std::vector<float> q(width * batch.num_rows()), out(q.size(), std::nanf("")), ref(q.size());
    for (float& v : q) v = normal(rng);
    cpu::AttentionScratch scratch;
    cpu::attend_batch(isa, batch, plan, pages, 0, shape, q.data(), out.data(), scratch);
    cpu::attend_batch_reference(batch, plan, pages, 0, shape, q.data(), ref.data());
    double worst = 0;
    bool finite = true;
    for (std::size_t i = 0; i < out.size(); ++i) {
      finite = finite && std::isfinite(out[i]);
      worst = std::max(worst, double(std::abs(out[i] - ref[i])));
    }
    CHECK(finite);  // every row and head was written
    CHECK(worst <= 2e-5 * max_value);
  }
}

}  // namespace specula
