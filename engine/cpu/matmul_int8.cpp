#include "engine/cpu/matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace specula::cpu {

const char* int8_kernel_name(Int8Kernel kernel) { return kernel == Int8Kernel::vnni ? "vnni" : "avx2"; }

Int8Kernel int8_kernel(MatmulIsa isa) {
  const bool vnni = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512vnni");
  return isa == MatmulIsa::avx512 && vnni ? Int8Kernel::vnni : Int8Kernel::avx2;
}

void quantize_rows(const float* x, int n, int64_t in, QuantizedRows& out) {
  constexpr int64_t kBlock = PackedInt8::kBlock;
  const int64_t blocks = (in + kBlock - 1) / kBlock, padded = blocks * kBlock;
  out.blocks = blocks;
  out.q.assign(static_cast<std::size_t>(n * padded), 0);
  out.scale.resize(static_cast<std::size_t>(n * blocks));
  out.bias.resize(static_cast<std::size_t>(n * blocks));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + r * in + b * kBlock;
      const int64_t count = std::min(kBlock, in - b * kBlock);
      float amax = 0;
      for (int64_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      int8_t* q = out.q.data() + r * padded + b * kBlock;
      int32_t sum = 0;
      for (int64_t i = 0; i < count; ++i) {
        q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(xb[i] * inv), -127.0f, 127.0f));
        sum += q[i];
      }
      out.scale[r * blocks + b] = d;
      out.bias[r * blocks + b] = -128 * sum;
    }
  }
}

void matmul_int8(const float* x, const PackedInt8& w, float* y, int n, Int8Kernel kernel) {
  thread_local QuantizedRows rows;  // the caller's thread; the workers only read it
  quantize_rows(x, n, w.in(), rows);
  if (kernel == Int8Kernel::vnni) return matmul_int8_vnni(rows, w, y, n);
  return matmul_int8_avx2(rows, w, y, n);
}

void matmul_int8_scalar(const float* x, const PackedInt8& w, float* y, int n) {
  QuantizedRows rows;
  quantize_rows(x, n, w.in(), rows);
  const int64_t out = w.out(), in = w.in(), padded = rows.blocks * PackedInt8::kBlock;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0;
      for (int64_t b = 0; b < rows.blocks; ++b) {
        int32_t isum = 0;
        for (int64_t k = b * PackedInt8::kBlock; k < std::min(in, (b + 1) * PackedInt8::kBlock); ++k)
          isum += int32_t(rows.q[r * padded + k]) * w.q(o, k);
        acc = std::fma(float(isum), w.scale(o, b) * rows.scale[r * rows.blocks + b], acc);
      }
      y[r * out + o] = acc;
    }
}

void int8_error_bound(const float* x, const PackedInt8& w, double* bound, int n) {
  QuantizedRows rows;
  quantize_rows(x, n, w.in(), rows);
  const int64_t out = w.out(), in = w.in(), padded = rows.blocks * PackedInt8::kBlock;
  const double u = std::ldexp(1.0, -24), slack = 1 + std::ldexp(1.0, -14);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double quantisation = 0, magnitude = 0;
      for (int64_t b = 0; b < rows.blocks; ++b) {
        const double hw = w.scale(o, b), dx = rows.scale[r * rows.blocks + b];
        double sum_x = 0, sum_w = 0;
        for (int64_t k = b * PackedInt8::kBlock; k < std::min(in, (b + 1) * PackedInt8::kBlock); ++k) {
          const double w_hat = hw * w.q(o, k), x_hat = dx * rows.q[r * padded + k];
          sum_x += std::fabs(x[r * in + k]);
          sum_w += std::fabs(w_hat);
          magnitude += std::fabs(x_hat * w_hat);
        }
        quantisation += hw / 2 * sum_x + dx / 2 * sum_w;
      }
      bound[r * out + o] = quantisation * slack + double(rows.blocks + 2) * u * magnitude;
    }
}

}  // namespace specula::cpu
