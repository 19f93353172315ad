#include "engine/cpu/ops.h"

#include <immintrin.h>

#include <cmath>

#include <algorithm>

namespace specula::cpu {

void rms_norm(const float* x, const float* w, float eps, float* y, int n, int dim) {
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    float* yr = y + static_cast<int64_t>(r) * dim;
    float sum = 0.0f;
    for (int i = 0; i < dim; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

RopeTable::RopeTable(int head_dim, float theta) : head_dim_(head_dim), inv_freq_(head_dim / 2) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq_[i] = 1.0f / std::pow(theta, exponent);
  }
}

void RopeTable::apply(float* x, int num_heads, int position) const {
  const int half = head_dim_ / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq_[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < num_heads; ++h) {
      float* xh = x + static_cast<int64_t>(h) * head_dim_;
      const float a = xh[i], b = xh[i + half];
      xh[i] = a * c - b * s;
      xh[i + half] = b * c + a * s;
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* delta, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += delta[i];
}

namespace {

// q . k over head_dim for 4 keys at once: an 8-lane FMA chain per key, then one fixed
// horizontal order, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) (two hadds, then the halves),
// then the head_dim % 8 tail in order. Lanes of different keys never mix, so a key's score
// is the same in any group of four (the last group repeats its first key as filler).
inline __m128 dot4(const float* q, const float* const k[4], int head_dim) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int d8 = head_dim - head_dim % 8;
  for (int d = 0; d < d8; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int i = 0; i < 4; ++i) acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[i] + d), acc[i]);
  }
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  __m128 sums = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  if (d8 < head_dim) {
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, sums);
    for (int i = 0; i < 4; ++i)
      for (int d = d8; d < head_dim; ++d) lanes[i] += q[d] * k[i][d];
    sums = _mm_load_ps(lanes);
  }
  return sums;
}

// out[h][d] = sum_j weights[h][j] * values[j][d], j in order (one FMA per term), for HB
// heads and the 8*W dimensions starting at d0, accumulated in registers; each value vector
// is loaded once for the HB heads.
//   weights: in [HB rows of stride num_keys]; out: out [HB rows of stride head_dim]
template <int HB, int W>
inline void weighted_sum(const float* weights, const float* const* values, int num_keys, int kv_offset, int d0,
                         int head_dim, float* out) {
  __m256 acc[HB][W];
  for (int h = 0; h < HB; ++h)
    for (int w = 0; w < W; ++w) acc[h][w] = _mm256_setzero_ps();
  for (int j = 0; j < num_keys; ++j) {
    const float* v = values[j] + kv_offset + d0;
    __m256 vv[W];
    for (int w = 0; w < W; ++w) vv[w] = _mm256_loadu_ps(v + 8 * w);
    for (int h = 0; h < HB; ++h) {
      const __m256 wj = _mm256_set1_ps(weights[static_cast<std::size_t>(h) * num_keys + j]);
      for (int w = 0; w < W; ++w) acc[h][w] = _mm256_fmadd_ps(wj, vv[w], acc[h][w]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(out + static_cast<std::size_t>(h) * head_dim + d0 + 8 * w, acc[h][w]);
}

// weighted_sum over all of head_dim for HB heads: 32-wide chunks, then 8-wide, then scalar.
template <int HB>
void weighted_sum_heads(const float* weights, const float* const* values, int num_keys, int kv_offset, int head_dim,
                        float* out) {
  int d = 0;
  for (; d + 32 <= head_dim; d += 32) weighted_sum<HB, 4>(weights, values, num_keys, kv_offset, d, head_dim, out);
  for (; d + 8 <= head_dim; d += 8) weighted_sum<HB, 1>(weights, values, num_keys, kv_offset, d, head_dim, out);
  for (; d < head_dim; ++d) {
    for (int h = 0; h < HB; ++h) {
      const float* wh = weights + static_cast<std::size_t>(h) * num_keys;
      float sum = 0.0f;
      for (int j = 0; j < num_keys; ++j) sum = std::fma(wh[j], values[j][kv_offset + d], sum);
      out[static_cast<std::size_t>(h) * head_dim + d] = sum;
    }
  }
}

// e^x for 8 lanes, x <= 0 (scores minus their maximum): x = n ln2 + r with |r| <= ln2 / 2,
// e^r from Cephes' degree-7 expf polynomial, 2^n put into the exponent bits. Within 2 ulp of
// the true value for x >= -87 (below that the result is flushed to 0, as expf would
// underflow towards it).
inline __m256 exp8_nonpositive(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, with ln2 split in a part exact in f32 and the rest.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 er = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(er, _mm256_castsi256_ps(bits)));
}

// p = softmax(p) in place, in one fixed order: the maximum, e^(p - max) 8 lanes at a time
// (the last partial group padded, its padding dropped), the lane sums added in the AVX2
// hsum order of matmul, then the normalisation.
void softmax_in_place(float* p, int count) {
  const float max_score = *std::max_element(p, p + count);
  const __m256 max8 = _mm256_set1_ps(max_score);
  __m256 total8 = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= count; j += 8) {
    const __m256 e = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(p + j), max8));
    _mm256_storeu_ps(p + j, e);
    total8 = _mm256_add_ps(total8, e);
  }
  if (j < count) {
    alignas(32) float tail[8];
    std::fill(tail, tail + 8, -INFINITY);
    std::copy(p + j, p + count, tail);
    const __m256 e = exp8_nonpositive(_mm256_sub_ps(_mm256_load_ps(tail), max8));  // padding: e = 0
    _mm256_store_ps(tail, e);
    std::copy(tail, tail + (count - j), p + j);
    total8 = _mm256_add_ps(total8, e);
  }
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(total8), _mm256_extractf128_ps(total8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const float inv_total = 1.0f / _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  for (int k = 0; k < count; ++k) p[k] *= inv_total;
}

// scores[h][j] = scale * q_h . k_j, four keys at a time; the heads reuse the four key rows
// from L1. kHeadDim > 0 fixes head_dim at compile time (the loops unroll), 0 leaves it to run time.
template <int kHeadDim>
void scaled_scores(const float* q, int num_heads, const float* const* keys, int num_keys, int kv_offset,
                   int run_time_head_dim, float scale, float* scores) {
  const int head_dim = kHeadDim > 0 ? kHeadDim : run_time_head_dim;
  for (int j = 0; j < num_keys; j += 4) {
    const int group = std::min(4, num_keys - j);
    const float* k[4];
    for (int i = 0; i < 4; ++i) k[i] = keys[j + (i < group ? i : 0)] + kv_offset;
    for (int h = 0; h < num_heads; ++h) {
      alignas(16) float dots[4];
      _mm_store_ps(dots, dot4(q + static_cast<std::size_t>(h) * head_dim, k, head_dim));
      float* sh = scores + static_cast<std::size_t>(h) * num_keys;
      for (int i = 0; i < group; ++i) sh[j + i] = dots[i] * scale;
    }
  }
}

}  // namespace

void attend_group(const float* q, int num_heads, const float* const* keys, const float* const* values, int num_keys,
                  int kv_offset, int head_dim, float scale, float* scores, float* out) {
  switch (head_dim) {  // the common sizes unrolled (the same operations in the same order)
    case 64: scaled_scores<64>(q, num_heads, keys, num_keys, kv_offset, head_dim, scale, scores); break;
    case 128: scaled_scores<128>(q, num_heads, keys, num_keys, kv_offset, head_dim, scale, scores); break;
    default: scaled_scores<0>(q, num_heads, keys, num_keys, kv_offset, head_dim, scale, scores); break;
  }
  for (int h = 0; h < num_heads; ++h) softmax_in_place(scores + static_cast<std::size_t>(h) * num_keys, num_keys);
  // Weighted sums of the values, up to three heads per pass over them.
  int h = 0;
  const auto at = [&](int head) { return static_cast<std::size_t>(head); };
  for (; h + 3 <= num_heads; h += 3)
    weighted_sum_heads<3>(scores + at(h) * num_keys, values, num_keys, kv_offset, head_dim, out + at(h) * head_dim);
  if (num_heads - h == 2)
    weighted_sum_heads<2>(scores + at(h) * num_keys, values, num_keys, kv_offset, head_dim, out + at(h) * head_dim);
  if (num_heads - h == 1)
    weighted_sum_heads<1>(scores + at(h) * num_keys, values, num_keys, kv_offset, head_dim, out + at(h) * head_dim);
}

}  // namespace specula::cpu
