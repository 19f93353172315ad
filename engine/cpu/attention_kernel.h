// defines: Attention<V>, the ISA-generic grouped-query attention kernel behind attend_group
// (attention.h), written once over the vector traits V (vector_avx2.h, vector_avx512.h) and
// compiled by one unit per instruction set (attention_avx2.cpp, attention_avx512.cpp), for each
// KV page element type (float, bf16 as uint16_t, int8 with per-(slot, head) scales): elements
// are upcast in registers as they are loaded, an int8 row's scale multiplies its score (keys)
// or its weight (values), so no dequantised copy of the cache is made. On f32 pages the
// operations are those of the f32-only kernel, in the same order.
//
// In an unnamed namespace on purpose, like matmul_tiles.h: each ISA unit gets its own copy.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/cpu/paged_rows.h"
#include "engine/cpu/vector_math.h"

namespace specula::cpu {
namespace {

// Loads of kLanes page elements of type T as floats (V::kLanes is 8 for AVX2, 16 for AVX-512).
template <class V, class T>
typename V::Reg load_kv(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return V::loadx(p);
  } else if constexpr (V::kLanes == 8) {
    if constexpr (std::is_same_v<T, uint16_t>)  // bf16: the high half of an f32
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    else
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  } else {
    if constexpr (std::is_same_v<T, uint16_t>)
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    else
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
}

// One page element as a float (int8: its integer value, the scale applied by the caller).
template <class T>
float kv_float(T x) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  } else {
    return static_cast<float>(x);
  }
}

template <class V>
struct Attention {
  using Reg = typename V::Reg;
  static constexpr int kLanes = V::kLanes;

  // The scale of the int8 row at element offset `row` (the head at kv_offset); 1 otherwise.
  template <class T>
  static float row_scale(const PagedRows& rows, std::size_t row, int kv_offset) {
    if constexpr (std::is_same_v<T, int8_t>)
      return rows.scales[(row + static_cast<std::size_t>(kv_offset)) / static_cast<std::size_t>(rows.head_dim)];
    else
      return 1.0f;
  }

  // q . k over head_dim for 4 keys at once: a kLanes-wide FMA chain per key, V::hsum4 (one
  // fixed order per key), then the head_dim % kLanes tail in order. Lanes of different keys
  // never mix, so a key's score is the same in any group of four (the last group repeats
  // its first key as filler).
  template <class T>
  static __m128 dot4(const float* q, const T* const k[4], int head_dim) {
    Reg acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    const int full = head_dim - head_dim % kLanes;
    for (int d = 0; d < full; d += kLanes) {
      const Reg qv = V::loadx(q + d);
      for (int i = 0; i < 4; ++i) acc[i] = V::fma(qv, load_kv<V>(k[i] + d), acc[i]);
    }
    __m128 sums = V::hsum4(acc);
    if (full < head_dim) {
      alignas(16) float lanes[4];
      _mm_store_ps(lanes, sums);
      for (int i = 0; i < 4; ++i)
        for (int d = full; d < head_dim; ++d) lanes[i] += q[d] * kv_float(k[i][d]);
      sums = _mm_load_ps(lanes);
    }
    return sums;
  }

  // scores[h][j] = scale * q_h . k_j (int8: scale * (q_h . k_j's integers) * k_j's scale), four
  // keys at a time; the heads reuse the four key rows from L1. kHeadDim > 0 fixes head_dim at
  // compile time (the loops unroll), 0 leaves it to run time.
  template <class T, int kHeadDim>
  static void scaled_scores(const float* q, int num_heads, const PagedRows& keys, int kv_offset,
                            int run_time_head_dim, float scale, float* scores) {
    const int head_dim = kHeadDim > 0 ? kHeadDim : run_time_head_dim;
    const int num_keys = keys.num_keys();
    const T* plane = static_cast<const T*>(keys.plane);
    PagedRowCursor cursor(keys);
    for (int j = 0; j < num_keys; j += 4) {
      const int group = std::min(4, num_keys - j);
      const T* k[4];
      float row_scales[4];
      for (int i = 0; i < group; ++i) {
        const std::size_t row = cursor.next();
        k[i] = plane + row + kv_offset;
        row_scales[i] = row_scale<T>(keys, row, kv_offset);
      }
      for (int i = group; i < 4; ++i) k[i] = k[0];
      for (int h = 0; h < num_heads; ++h) {
        alignas(16) float dots[4];
        _mm_store_ps(dots, dot4<T>(q + static_cast<std::size_t>(h) * head_dim, k, head_dim));
        float* sh = scores + static_cast<std::size_t>(h) * num_keys;
        for (int i = 0; i < group; ++i) {
          if constexpr (std::is_same_v<T, int8_t>)
            sh[j + i] = dots[i] * row_scales[i] * scale;
          else
            sh[j + i] = dots[i] * scale;
        }
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

  // out[h][d] = sum_j weights[h][j] * values[j][d], j in order (one FMA per term; int8: the
  // weight times the row's scale), for HB heads and the W * kLanes dimensions from d0,
  // accumulated in registers; each value vector is loaded once for the HB heads.
  //   weights: in [HB rows of stride num_keys]; out: out [HB rows of stride head_dim]
  template <class T, int HB, int W>
  static void weighted_sum(const float* weights, const PagedRows& values, int kv_offset, int d0, int head_dim,
                           float* out) {
    Reg acc[HB][W];
    for (int h = 0; h < HB; ++h)
      for (int w = 0; w < W; ++w) acc[h][w] = V::zero();
    const int num_keys = values.num_keys();
    const T* plane = static_cast<const T*>(values.plane);
    PagedRowCursor cursor(values);
    for (int j = 0; j < num_keys; ++j) {
      const std::size_t row = cursor.next();
      const T* v = plane + row + kv_offset + d0;
      Reg vv[W];
      for (int w = 0; w < W; ++w) vv[w] = load_kv<V>(v + kLanes * w);
      for (int h = 0; h < HB; ++h) {
        float weight = weights[static_cast<std::size_t>(h) * num_keys + j];
        if constexpr (std::is_same_v<T, int8_t>) weight *= row_scale<T>(values, row, kv_offset);
        const Reg wj = V::set1(weight);
        for (int w = 0; w < W; ++w) acc[h][w] = V::fma(wj, vv[w], acc[h][w]);
      }
    }
    for (int h = 0; h < HB; ++h)
      for (int w = 0; w < W; ++w) V::storeu(out + static_cast<std::size_t>(h) * head_dim + d0 + kLanes * w, acc[h][w]);
  }

  // weighted_sum over all of head_dim for HB heads: 4-vector chunks, then 1-vector, then scalar.
  template <class T, int HB>
  static void weighted_sum_heads(const float* weights, const PagedRows& values, int kv_offset, int head_dim,
                                 float* out) {
    const int num_keys = values.num_keys();
    int d = 0;
    for (; d + 4 * kLanes <= head_dim; d += 4 * kLanes)
      weighted_sum<T, HB, 4>(weights, values, kv_offset, d, head_dim, out);
    for (; d + kLanes <= head_dim; d += kLanes) weighted_sum<T, HB, 1>(weights, values, kv_offset, d, head_dim, out);
    const T* plane = static_cast<const T*>(values.plane);
    for (; d < head_dim; ++d) {
      for (int h = 0; h < HB; ++h) {
        const float* wh = weights + static_cast<std::size_t>(h) * num_keys;
        float sum = 0.0f;
        PagedRowCursor cursor(values);
        for (int j = 0; j < num_keys; ++j) {
          const std::size_t row = cursor.next();
          float weight = wh[j];
          if constexpr (std::is_same_v<T, int8_t>) weight *= row_scale<T>(values, row, kv_offset);
          sum = std::fma(weight, kv_float(plane[row + kv_offset + d]), sum);
        }
        out[static_cast<std::size_t>(h) * head_dim + d] = sum;
      }
    }
  }

  template <class T>
  static void attend_typed(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values,
                           int kv_offset, int head_dim, float scale, float* scores, float* out) {
    const int num_keys = keys.num_keys();
    switch (head_dim) {  // the common sizes unrolled (the same operations in the same order)
      case 64: scaled_scores<T, 64>(q, num_heads, keys, kv_offset, head_dim, scale, scores); break;
      case 128: scaled_scores<T, 128>(q, num_heads, keys, kv_offset, head_dim, scale, scores); break;
      default: scaled_scores<T, 0>(q, num_heads, keys, kv_offset, head_dim, scale, scores); break;
    }
    for (int h = 0; h < num_heads; ++h) softmax_in_place(scores + static_cast<std::size_t>(h) * num_keys, num_keys);
    // Weighted sums of the values, up to three heads per pass over them.
    const auto at = [](int head) { return static_cast<std::size_t>(head); };
    int h = 0;
    for (; h + 3 <= num_heads; h += 3)
      weighted_sum_heads<T, 3>(scores + at(h) * num_keys, values, kv_offset, head_dim, out + at(h) * head_dim);
    if (num_heads - h == 2)
      weighted_sum_heads<T, 2>(scores + at(h) * num_keys, values, kv_offset, head_dim, out + at(h) * head_dim);
    if (num_heads - h == 1)
      weighted_sum_heads<T, 1>(scores + at(h) * num_keys, values, kv_offset, head_dim, out + at(h) * head_dim);
  }

  // Keys and values share one dtype (one PageStorage).
  static void attend_group(const float* q, int num_heads, const PagedRows& keys, const PagedRows& values,
                           int kv_offset, int head_dim, float scale, float* scores, float* out) {
    switch (keys.dtype) {
      case KvDType::kF32:
        return attend_typed<float>(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
      case KvDType::kBF16:
        return attend_typed<uint16_t>(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
      case KvDType::kInt8:
        return attend_typed<int8_t>(q, num_heads, keys, values, kv_offset, head_dim, scale, scores, out);
    }
  }
};

}  // namespace
}  // namespace specula::cpu
