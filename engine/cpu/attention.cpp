#include "engine/cpu/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "engine/cpu/matmul.h"
#include "engine/cpu/threads.h"

namespace specula::cpu {

void attend_group(MatmulIsa isa, const float* q, int num_heads, const PagedRows& keys, const PagedRows& values,
                  int kv_offset, int head_dim, float scale, float* scores, float* out) {
  if (isa == MatmulIsa::avx512)
    return attend_group_avx512(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
  attend_group_avx2(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
}

void attend_group(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values, int kv_offset,
                  int head_dim, float scale, float* scores, float* out) {
  attend_group(matmul_isa(), q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
}

PagedRows visible_rows(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, int layer, int kv,
                       int seq_index, int r, int window) {
  PagedRows rows;
  const KvLayout& layout = pages.layout();
  const std::size_t plane = kv == 0 ? 0 : pages.value_offset();
  rows.plane = static_cast<const unsigned char*>(pages.layer_data(layer)) + plane * kv_dtype_size(layout.dtype);
  rows.dtype = layout.dtype;
  if (layout.dtype == KvDType::kInt8) {
    rows.scales = pages.layer_scales(layer) + plane / static_cast<std::size_t>(layout.head_dim);
    rows.head_dim = layout.head_dim;
  }
  rows.block_stride = pages.block_stride();
  rows.kv_dim = pages.layout().kv_dim();
  rows.block_size = plan.block_size;
  rows.pages = plan.kv_indices.data() + plan.kv_indptr[static_cast<std::size_t>(seq_index)];
  const int prefix = batch.visible_prefix[static_cast<std::size_t>(seq_index)];
  const int mask_begin = batch.mask_indptr[static_cast<std::size_t>(r)];
  const int mask_end = batch.mask_indptr[static_cast<std::size_t>(r) + 1];
  if (mask_begin == mask_end) {  // causal: every slot up to the row's own
    rows.prefix_len = prefix + (r - batch.row_indptr[static_cast<std::size_t>(seq_index)]) + 1;
  } else {
    rows.prefix_len = prefix;
    rows.extra_slots = batch.mask_indices.data() + mask_begin;
    rows.num_extra = mask_end - mask_begin;
  }
  if (window > 0) {
    rows.first = std::max(0, batch.positions[static_cast<std::size_t>(r)] - window + 1);
    assert(rows.first < rows.prefix_len + rows.num_extra);  // the row's own key stays
  }
  return rows;
}

namespace {

// Calls item(row, seq_index) for every row of the batch, in row order.
template <class Item>
void for_each_row(const RaggedBatch& batch, Item&& item) {
  for (int s = 0; s < batch.num_seqs(); ++s)
    for (int r = batch.row_indptr[static_cast<std::size_t>(s)]; r < batch.row_indptr[static_cast<std::size_t>(s) + 1]; ++r)
      item(r, s);
}

}  // namespace

void attend_batch(MatmulIsa isa, const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, int layer,
                  const AttentionShape& shape, const float* q, float* out, AttentionScratch& scratch) {
  const int head_dim = shape.head_dim;
  const int group = shape.num_heads / shape.num_kv_heads;
  const std::size_t row_width = static_cast<std::size_t>(shape.num_heads) * static_cast<std::size_t>(head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int n = batch.num_rows();

  std::vector<int>& seq_of_row = scratch.seq_of_row;
  seq_of_row.resize(static_cast<std::size_t>(n));
  double keys_total = 0;
  for_each_row(batch, [&](int r, int s) {
    seq_of_row[static_cast<std::size_t>(r)] = s;
    keys_total += visible_rows(batch, plan, pages, layer, 0, s, r, shape.window).num_keys();
  });
  // One work item per (row, key/value head): the `group` query heads that share it.
  const auto item = [&](int r, int g, std::vector<float>& scores) {
    const int s = seq_of_row[static_cast<std::size_t>(r)];
    const PagedRows keys = visible_rows(batch, plan, pages, layer, 0, s, r, shape.window);
    const PagedRows values = visible_rows(batch, plan, pages, layer, 1, s, r, shape.window);
    scores.resize(static_cast<std::size_t>(keys.num_keys()) * static_cast<std::size_t>(group));
    const std::size_t at = static_cast<std::size_t>(r) * row_width + static_cast<std::size_t>(g) * group * head_dim;
    attend_group(isa, q + at, group, keys, values, g * head_dim, head_dim, scale, scores.data(), out + at);
  };
  // One-thread time: ~4 flops per head, key and dimension at ~30 GFLOP/s.
  const double flops = 4.0 * shape.num_heads * keys_total * head_dim;
  const int kv_heads = shape.num_kv_heads;
  if (worth_threads(flops / 30)) {
#pragma omp parallel
    {
      std::vector<float> scores;
#pragma omp for collapse(2) schedule(static)
      for (int r = 0; r < n; ++r)
        for (int g = 0; g < kv_heads; ++g) item(r, g, scores);
    }
  } else {
    for (int r = 0; r < n; ++r)
      for (int g = 0; g < kv_heads; ++g) item(r, g, scratch.scores);
  }
}

void attend_batch_reference(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, int layer,
                            const AttentionShape& shape, const float* q, float* out) {
  const int head_dim = shape.head_dim;
  const int group = shape.num_heads / shape.num_kv_heads;
  const std::size_t row_width = static_cast<std::size_t>(shape.num_heads) * static_cast<std::size_t>(head_dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for_each_row(batch, [&](int r, int s) {
    const PagedRows keys = visible_rows(batch, plan, pages, layer, 0, s, r, shape.window);
    const PagedRows values = visible_rows(batch, plan, pages, layer, 1, s, r, shape.window);
    const int num_keys = keys.num_keys();
    std::vector<double> score(static_cast<std::size_t>(num_keys));
    for (int h = 0; h < shape.num_heads; ++h) {
      const float* qh = q + static_cast<std::size_t>(r) * row_width + static_cast<std::size_t>(h) * head_dim;
      const int offset = (h / group) * head_dim;
      double max_score = -INFINITY;
      for (int j = 0; j < num_keys; ++j) {
        double dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += double(qh[d]) * keys.element(j, offset + d);
        max_score = std::max(max_score, score[static_cast<std::size_t>(j)] = dot * scale);
      }
      double total = 0;
      for (double& v : score) total += (v = std::exp(v - max_score));
      for (int d = 0; d < head_dim; ++d) {
        double sum = 0;
        for (int j = 0; j < num_keys; ++j) sum += score[static_cast<std::size_t>(j)] * values.element(j, offset + d);
        out[static_cast<std::size_t>(r) * row_width + static_cast<std::size_t>(h) * head_dim + d] =
            static_cast<float>(sum / total);
      }
    }
  });
}

}  // namespace specula::cpu
