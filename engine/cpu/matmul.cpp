#include "engine/cpu/matmul.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "engine/error.h"

namespace specula::cpu {
namespace {

// 8 consecutive weights as f32.
template <DType T>
inline __m256 load8(const unsigned char* p) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

template <DType T>
inline float load1(const unsigned char* p) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if constexpr (T == DType::F16) {
      return _cvtsh_ss(h);
    } else {
      uint32_t bits = uint32_t(h) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
  }
}

// The one horizontal sum every output uses: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  const __m128 s4 = _mm_add_ps(lo, hi);
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// A tile of R rows x O outputs. Each (r, o) has its own accumulator, so the order of its
// reduction does not depend on R or O.
template <DType T, int R, int O>
inline void tile(const float* x, int64_t in, const unsigned char* w, int64_t w_stride, float* y, int64_t out) {
  constexpr int64_t es = static_cast<int64_t>(T == DType::F32 ? 4 : 2);
  __m256 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  const int64_t k8 = in - in % 8;
  for (int64_t k = 0; k < k8; k += 8) {
    __m256 wv[O];
    for (int o = 0; o < O; ++o) wv[o] = load8<T>(w + o * w_stride + k * es);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * in + k);
      for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O; ++o) {
      float s = hsum(acc[r][o]);
      for (int64_t k = k8; k < in; ++k) s += x[r * in + k] * load1<T>(w + o * w_stride + k * es);
      y[r * out + o] = s;
    }
  }
}

// All n rows against O outputs: blocks of 4 rows, then one tile for the 1-3 left over, so
// a verify pass of a few rows reads each weight once per 4 rows, not once per row.
template <DType T, int O>
void rows_for_outputs(const float* x, int n, int64_t in, const unsigned char* w, int64_t w_stride, float* y,
                      int64_t out) {
  int r = 0;
  for (; r + 4 <= n; r += 4) tile<T, 4, O>(x + r * in, in, w, w_stride, y + r * out, out);
  switch (n - r) {
    case 3: return tile<T, 3, O>(x + r * in, in, w, w_stride, y + r * out, out);
    case 2: return tile<T, 2, O>(x + r * in, in, w, w_stride, y + r * out, out);
    case 1: return tile<T, 1, O>(x + r * in, in, w, w_stride, y + r * out, out);
    default: return;
  }
}

template <DType T>
void matmul_typed(const float* x, const TensorView& w, float* y, int n) {
  const int64_t out = w.shape[0], in = w.shape[1];
  const int64_t w_stride = in * static_cast<int64_t>(dtype_size(T));
  const auto* wb = static_cast<const unsigned char*>(w.data);
  constexpr int64_t kBlock = 8;  // outputs per work item: 8 for decode's independent FMA chains
  const int64_t blocks = (out + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o0 = b * kBlock;
    if (o0 + kBlock <= out) {
      if (n <= 2) {  // decode and two-row verifies: 8 independent FMA chains per row
        rows_for_outputs<T, 8>(x, n, in, wb + o0 * w_stride, w_stride, y + o0, out);
      } else {
        rows_for_outputs<T, 4>(x, n, in, wb + o0 * w_stride, w_stride, y + o0, out);
        rows_for_outputs<T, 4>(x, n, in, wb + (o0 + 4) * w_stride, w_stride, y + o0 + 4, out);
      }
    } else {
      for (int64_t o = o0; o < out; ++o) rows_for_outputs<T, 1>(x, n, in, wb + o * w_stride, w_stride, y + o, out);
    }
  }
}

}  // namespace

void matmul_weights(const float* x, const TensorView& w, float* y, int n) {
  SPECULA_CHECK(w.shape.size() == 2, w.origin, ": tensor '", w.name, "' must be 2-D for a matrix product");
  switch (w.dtype) {
    case DType::F32: return matmul_typed<DType::F32>(x, w, y, n);
    case DType::F16: return matmul_typed<DType::F16>(x, w, y, n);
    case DType::BF16: return matmul_typed<DType::BF16>(x, w, y, n);
  }
  throw SpeculaError(detail::concat(w.origin, ": tensor '", w.name, "': unsupported dtype"));
}

namespace {
template <DType T>
void row_typed(const TensorView& w, int64_t row, float* out) {
  const int64_t cols = w.shape[1];
  const auto* p = static_cast<const unsigned char*>(w.data) + row * cols * static_cast<int64_t>(dtype_size(T));
  for (int64_t c = 0; c < cols; ++c) out[c] = load1<T>(p + c * static_cast<int64_t>(dtype_size(T)));
}
}  // namespace

void weight_row(const TensorView& w, int64_t row, float* out) {
  switch (w.dtype) {
    case DType::F32: return row_typed<DType::F32>(w, row, out);
    case DType::F16: return row_typed<DType::F16>(w, row, out);
    case DType::BF16: return row_typed<DType::BF16>(w, row, out);
  }
}

void matmul_reference(const float* x, const TensorView& w, float* y, int n) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<float> wrow(static_cast<std::size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    weight_row(w, o, wrow.data());
    for (int r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += double(x[r * in + k]) * wrow[k];
      y[r * out + o] = static_cast<float>(s);
    }
  }
}

}  // namespace specula::cpu
