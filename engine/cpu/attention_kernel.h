// defines: Attention<V>, the ISA-generic grouped-query attention kernel behind attend_group
// (attention.h), written once over the vector traits V (vector_avx2.h, vector_avx512.h) and
// compiled by one unit per instruction set (attention_avx2.cpp, attention_avx512.cpp).
//
// In an unnamed namespace on purpose, like matmul_tiles.h: each ISA unit gets its own copy.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/cpu/paged_rows.h"
#include "engine/cpu/vector_math.h"

namespace specula::cpu {
namespace {

template <class V>
struct Attention {
  using Reg = typename V::Reg;
  static constexpr int kLanes = V::kLanes;

  // q . k over head_dim for 4 keys at once: a kLanes-wide FMA chain per key, V::hsum4 (one
  // fixed order per key), then the head_dim % kLanes tail in order. Lanes of different keys
  // never mix, so a key's score is the same in any group of four (the last group repeats
  // its first key as filler).
  static __m128 dot4(const float* q, const float* const k[4], int head_dim) {
    Reg acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    const int full = head_dim - head_dim % kLanes;
    for (int d = 0; d < full; d += kLanes) {
      const Reg qv = V::loadx(q + d);
      for (int i = 0; i < 4; ++i) acc[i] = V::fma(qv, V::loadx(k[i] + d), acc[i]);
    }
    __m128 sums = V::hsum4(acc);
    if (full < head_dim) {
      alignas(16) float lanes[4];
      _mm_store_ps(lanes, sums);
      for (int i = 0; i < 4; ++i)
        for (int d = full; d < head_dim; ++d) lanes[i] += q[d] * k[i][d];
      sums = _mm_load_ps(lanes);
    }
    return sums;
  }

  // scores[h][j] = scale * q_h . k_j, four keys at a time; the heads reuse the four key rows
  // from L1. kHeadDim > 0 fixes head_dim at compile time (the loops unroll), 0 leaves it to
  // run time.
  template <int kHeadDim>
  static void scaled_scores(const float* q, int num_heads, const PagedRows& keys, int kv_offset,
                            int run_time_head_dim, float scale, float* scores) {
    const int head_dim = kHeadDim > 0 ? kHeadDim : run_time_head_dim;
    const int num_keys = keys.num_keys();
    PagedRowCursor cursor(keys);
    for (int j = 0; j < num_keys; j += 4) {
      const int group = std::min(4, num_keys - j);
      const float* k[4];
      for (int i = 0; i < group; ++i) k[i] = cursor.next() + kv_offset;
      for (int i = group; i < 4; ++i) k[i] = k[0];
      for (int h = 0; h < num_heads; ++h) {
        alignas(16) float dots[4];
        _mm_store_ps(dots, dot4(q + static_cast<std::size_t>(h) * head_dim, k, head_dim));
        float* sh = scores + static_cast<std::size_t>(h) * num_keys;
        for (int i = 0; i < group; ++i) sh[j + i] = dots[i] * scale;
      }
    }
  }

  // p = softmax(p) in place, in one fixed order: the maximum, e^(p - max) kLanes at a time
  // (exp_clamped: a score 87 or more below the maximum counts as e^-87, nothing next to the
  // maximum's e^0 = 1 in an f32 sum; the
  // last partial group padded with -inf, only its real lanes stored), the lane sums added by
  // V::hsum, then the normalisation.
  static void softmax_in_place(float* p, int count) {
    const Reg max_score = V::set1(*std::max_element(p, p + count));
    Reg total = V::zero();
    int j = 0;
    for (; j + kLanes <= count; j += kLanes) {
      const Reg e = exp_clamped<V>(V::sub(V::loadx(p + j), max_score));
      V::storeu(p + j, e);
      total = V::add(total, e);
    }
    if (j < count) {
      alignas(64) float tail[kLanes];
      std::fill(tail, tail + kLanes, -INFINITY);
      std::copy(p + j, p + count, tail);
      const Reg e = exp_clamped<V>(V::sub(V::loadx(tail), max_score));
      V::storeu(tail, e);
      std::copy(tail, tail + (count - j), p + j);
      total = V::add(total, e);
    }
    const float inv_total = 1.0f / V::hsum(total);
    for (int k = 0; k < count; ++k) p[k] *= inv_total;
  }

  // out[h][d] = sum_j weights[h][j] * values[j][d], j in order (one FMA per term), for HB heads
  // and the W * kLanes dimensions from d0, accumulated in registers; each value vector is
  // loaded once for the HB heads.
  //   weights: in [HB rows of stride num_keys]; out: out [HB rows of stride head_dim]
  template <int HB, int W>
  static void weighted_sum(const float* weights, const PagedRows& values, int kv_offset, int d0, int head_dim,
                           float* out) {
    Reg acc[HB][W];
    for (int h = 0; h < HB; ++h)
      for (int w = 0; w < W; ++w) acc[h][w] = V::zero();
    const int num_keys = values.num_keys();
    PagedRowCursor cursor(values);
    for (int j = 0; j < num_keys; ++j) {
      const float* v = cursor.next() + kv_offset + d0;
      Reg vv[W];
      for (int w = 0; w < W; ++w) vv[w] = V::loadx(v + kLanes * w);
      for (int h = 0; h < HB; ++h) {
        const Reg wj = V::set1(weights[static_cast<std::size_t>(h) * num_keys + j]);
        for (int w = 0; w < W; ++w) acc[h][w] = V::fma(wj, vv[w], acc[h][w]);
      }
    }
    for (int h = 0; h < HB; ++h)
      for (int w = 0; w < W; ++w) V::storeu(out + static_cast<std::size_t>(h) * head_dim + d0 + kLanes * w, acc[h][w]);
  }

  // weighted_sum over all of head_dim for HB heads: 4-vector chunks, then 1-vector, then scalar.
  template <int HB>
  static void weighted_sum_heads(const float* weights, const PagedRows& values, int kv_offset, int head_dim,
                                 float* out) {
    const int num_keys = values.num_keys();
    int d = 0;
    for (; d + 4 * kLanes <= head_dim; d += 4 * kLanes) weighted_sum<HB, 4>(weights, values, kv_offset, d, head_dim, out);
    for (; d + kLanes <= head_dim; d += kLanes) weighted_sum<HB, 1>(weights, values, kv_offset, d, head_dim, out);
    for (; d < head_dim; ++d) {
      for (int h = 0; h < HB; ++h) {
        const float* wh = weights + static_cast<std::size_t>(h) * num_keys;
        float sum = 0.0f;
        PagedRowCursor cursor(values);
        for (int j = 0; j < num_keys; ++j) sum = std::fma(wh[j], cursor.next()[kv_offset + d], sum);
        out[static_cast<std::size_t>(h) * head_dim + d] = sum;
      }
    }
  }

  static void attend_group(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values,
                           int kv_offset, int head_dim, float scale, float* scores, float* out) {
    const int num_keys = keys.num_keys();
    switch (head_dim) {  // the common sizes unrolled (the same operations in the same order)
      case 64: scaled_scores<64>(q, num_heads, keys, kv_offset, head_dim, scale, scores); break;
      case 128: scaled_scores<128>(q, num_heads, keys, kv_offset, head_dim, scale, scores); break;
      default: scaled_scores<0>(q, num_heads, keys, kv_offset, head_dim, scale, scores); break;
    }
    for (int h = 0; h < num_heads; ++h) softmax_in_place(scores + static_cast<std::size_t>(h) * num_keys, num_keys);
    // Weighted sums of the values, up to three heads per pass over them.
    const auto at = [](int head) { return static_cast<std::size_t>(head); };
    int h = 0;
    for (; h + 3 <= num_heads; h += 3)
      weighted_sum_heads<3>(scores + at(h) * num_keys, values, kv_offset, head_dim, out + at(h) * head_dim);
    if (num_heads - h == 2)
      weighted_sum_heads<2>(scores + at(h) * num_keys, values, kv_offset, head_dim, out + at(h) * head_dim);
    if (num_heads - h == 1)
      weighted_sum_heads<1>(scores + at(h) * num_keys, values, kv_offset, head_dim, out + at(h) * head_dim);
  }
};

}  // namespace
}  // namespace specula::cpu
