#include "engine/cpu/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "engine/cpu/vector_avx2.h"
#include "engine/cpu/vector_math.h"

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

void add_bias(float* y, const float* bias, int n, int dim) {
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < dim; ++i) y[static_cast<int64_t>(r) * dim + i] += bias[i];
}

RopeTable::RopeTable(int head_dim, float theta, const RopeScaling& scaling)
    : head_dim_(head_dim), inv_freq_(head_dim / 2) {
  const float factor = scaling.factor;
  const float old_context = static_cast<float>(scaling.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / scaling.low_freq_factor;
  const float high_freq_wavelen = old_context / scaling.high_freq_factor;
  for (int i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float f = 1.0f / std::pow(theta, exponent);
    switch (scaling.type) {
      case RopeScaling::Type::kNone:
        break;
      case RopeScaling::Type::kLinear:
        f /= factor;
        break;
      case RopeScaling::Type::kLlama3: {
        // All in f32, in the order of _compute_llama3_parameters.
        const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
        if (wavelen > low_freq_wavelen) {
          f /= factor;
        } else if (!(wavelen < high_freq_wavelen)) {
          const float smooth = (old_context / wavelen - scaling.low_freq_factor) /
                               (scaling.high_freq_factor - scaling.low_freq_factor);
          f = (1.0f - smooth) * f / factor + smooth * f;
        }
        break;
      }
    }
    inv_freq_[i] = f;
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
  // 8 lanes at a time with the polynomial exp (AVX2 on every CPU: elementwise, so the result
  // is the same whatever the batch); the tail through the same vector code, padded.
  const auto silu8 = [](__m256 g, __m256 u) {
    const __m256 e = exp_clamped<Avx2>(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
  };
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(gate + i, silu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < count) {
    alignas(32) float g[8] = {}, u[8] = {};
    std::copy(gate + i, gate + count, g);
    std::copy(up + i, up + count, u);
    _mm256_store_ps(g, silu8(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::copy(g, g + (count - i), gate + i);
  }
}

void add_inplace(float* x, const float* delta, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += delta[i];
}

}  // namespace specula::cpu
