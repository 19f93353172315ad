// The matrix product on every instruction set this CPU runs (AVX2, AVX-512) against the
// scalar double-precision reference, and its batch invariance, over a sweep of shapes
// (inner sizes with and without a tail past the last full vector) and the three weight
// dtypes (weights deliberately misaligned, as they may be inside a safetensors mapping).
//
// Error bound: the kernel upcasts weights exactly (F16 and BF16 are subsets of F32) and
// accumulates sum_k x_k w_k in f32 with FMAs; any order of summing `in` terms in f32 is within
// gamma_in * sum_k |x_k w_k| of the exact sum (gamma_n = n u / (1 - n u), u = 2^-24), and the
// reference rounds the exact (double) sum once more to f32: |y - ref| <= gamma_in * sum|x w|
// + u |ref|. The bound is the same for every dtype since the weights enter exactly.
#include <immintrin.h>
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/matmul.h"

namespace specula {
namespace {

constexpr double kUnit = 1.0 / (1 << 24);

// A weight matrix [out, in] stored in `dtype` at a deliberately odd byte offset.
struct Weights {
  std::vector<unsigned char> storage;
  std::vector<float> values;  // the exact f32 value of every stored weight, [out, in]
  TensorView view;

  Weights(DType dtype, int out, int in, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t count = static_cast<std::size_t>(out) * in, es = dtype_size(dtype);
    const std::size_t offset = 1;  // misaligned for every dtype
    storage.assign(offset + count * es, 0);
    values.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      float v = normal(rng);
      unsigned char* p = storage.data() + offset + i * es;
      if (dtype == DType::F32) {
        std::memcpy(p, &v, 4);
      } else if (dtype == DType::F16) {
        const uint16_t h = _cvtss_sh(v, 0);
        std::memcpy(p, &h, 2);
        v = _cvtsh_ss(h);
      } else {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t b = static_cast<uint16_t>(bits >> 16);  // truncation is a valid BF16 value
        std::memcpy(p, &b, 2);
        bits = uint32_t(b) << 16;
        std::memcpy(&v, &bits, 4);
      }
      values[i] = v;
    }
    view = TensorView{"test.weight", dtype, {out, in}, storage.data() + offset, "memory"};
  }
};

std::vector<float> random_input(int n, int in, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n) * in);
  for (float& v : x) v = normal(rng);
  return x;
}

// The BF16 value nearest to finite v, ties to the even one: of v truncated and the next
// BF16 away from zero, whichever is closer.
uint16_t bf16_nearest_even(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const auto as_float = [](uint16_t b) {
    const uint32_t wide = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    return double(f);
  };
  const uint16_t toward_zero = static_cast<uint16_t>(bits >> 16), away = static_cast<uint16_t>(toward_zero + 1);
  const double below = std::abs(double(v) - as_float(toward_zero)), above = std::abs(as_float(away) - double(v));
  if (below != above) return below < above ? toward_zero : away;
  return (toward_zero & 1) ? away : toward_zero;
}

}  // namespace

TEST_CASE("matmul: every ISA's kernel equals the double reference within the f32 summation bound",
          "[engine][matmul]") {
  std::mt19937 rng(7);
  for (cpu::MatmulIsa isa : cpu::supported_matmul_isas())
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (int in : {8, 13, 40, 384}) {
      const double gamma = in * kUnit / (1 - in * kUnit);
      for (int out : {1, 7, 12, 33, 128}) {
        Weights w(dtype, out, in, rng);
        const cpu::PackedWeights packed(w.view, isa);
        for (int n : {1, 2, 3, 5, 8, 17}) {
          INFO(cpu::isa_name(isa) << ' ' << dtype_name(dtype) << " n=" << n << " in=" << in << " out=" << out);
          const auto x = random_input(n, in, rng);
          std::vector<float> y(static_cast<std::size_t>(n) * out), ref(y.size());
          cpu::matmul(x.data(), packed, y.data(), n);
          cpu::matmul_reference(x.data(), w.view, ref.data(), n);
          double worst = 0;  // largest error as a fraction of its bound
          for (int r = 0; r < n; ++r) {
            for (int o = 0; o < out; ++o) {
              double magnitude = 0;
              for (int k = 0; k < in; ++k)
                magnitude += std::abs(double(x[r * in + k]) * w.values[static_cast<std::size_t>(o) * in + k]);
              const double bound = gamma * magnitude + kUnit * std::abs(ref[r * out + o]);
              const double err = std::abs(double(y[r * out + o]) - ref[r * out + o]);
              worst = std::max(worst, bound > 0 ? err / bound : err);
            }
          }
          CHECK(worst <= 1.0);
        }
      }
    }
  }
}

TEST_CASE("matmul: a row of an n-row product is bitwise the row computed alone", "[engine][matmul]") {
  std::mt19937 rng(11);
  const int threads_before = omp_get_max_threads();
  for (cpu::MatmulIsa isa : cpu::supported_matmul_isas())
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (int in : {8, 13, 40, 384}) {
      // 1031 outputs: an odd number of groups, the last one partial, and enough work (at
      // in = 384) that the product is split across threads.
      for (int out : {1, 7, 12, 33, 128, 1031}) {
        Weights w(dtype, out, in, rng);
        const cpu::PackedWeights packed(w.view, isa);
        for (int n : {2, 3, 5, 8, 17}) {
          INFO(cpu::isa_name(isa) << ' ' << dtype_name(dtype) << " n=" << n << " in=" << in << " out=" << out);
          const auto x = random_input(n, in, rng);
          std::vector<float> y(static_cast<std::size_t>(n) * out), alone(static_cast<std::size_t>(out));
          cpu::matmul(x.data(), packed, y.data(), n);
          for (int r = 0; r < n; ++r) {
            omp_set_num_threads(1 + r % 2);  // and whatever the thread count
            cpu::matmul(&x[static_cast<std::size_t>(r) * in], packed, alone.data(), 1);
            CHECK(std::memcmp(alone.data(), &y[static_cast<std::size_t>(r) * out], sizeof(float) * out) == 0);
          }
          omp_set_num_threads(threads_before);
          // And every contiguous sub-batch gives the same rows as the whole batch.
          const int half = n / 2;
          std::vector<float> tail(static_cast<std::size_t>(n - half) * out);
          cpu::matmul(&x[static_cast<std::size_t>(half) * in], packed, tail.data(), n - half);
          CHECK(std::memcmp(tail.data(), &y[static_cast<std::size_t>(half) * out], tail.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul: the process-wide ISA is the widest this CPU runs", "[engine][matmul]") {
  // (SPECULA_MATMUL_ISA unset in the test environment.)
  REQUIRE(std::getenv("SPECULA_MATMUL_ISA") == nullptr);
  CHECK(cpu::matmul_isa() == cpu::supported_matmul_isas().back());
  CHECK(cpu::supported_matmul_isas().front() == cpu::MatmulIsa::avx2);
}

TEST_CASE("matmul: packed weights hold every weight at its documented place, padding zero", "[engine][matmul]") {
  std::mt19937 rng(5);
  for (cpu::MatmulIsa isa : cpu::supported_matmul_isas())
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const int out = 6, in = 45;  // a partial last group and a partial last step
    Weights w(dtype, out, in, rng);
    const cpu::PackedWeights packed(w.view, isa);
    const int64_t es = static_cast<int64_t>(dtype_size(dtype)), step = cpu::k_step(isa, dtype);
    const int64_t steps = (in + step - 1) / step;
    REQUIRE(packed.groups() == 2);
    REQUIRE(packed.group_bytes() == steps * 4 * step * es);
    const auto* src = static_cast<const unsigned char*>(w.view.data);
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t s = 0; s < steps; ++s)
        for (int64_t o = 0; o < 4; ++o)
          for (int64_t j = 0; j < step; ++j) {
            const int64_t row = 4 * g + o, k = s * step + j;
            const unsigned char* at = packed.group(g) + ((s * 4 + o) * step + j) * es;
            const bool real = row < out && k < in;
            INFO(cpu::isa_name(isa) << ' ' << dtype_name(dtype) << " row " << row << " k " << k);
            std::vector<unsigned char> expected(static_cast<std::size_t>(es), 0);
            if (real) std::memcpy(expected.data(), src + (row * in + k) * es, static_cast<std::size_t>(es));
            CHECK(std::memcmp(at, expected.data(), static_cast<std::size_t>(es)) == 0);
          }
  }
}

TEST_CASE("matmul: weights converted at packing equal weights stored in that dtype", "[engine][matmul]") {
  // Packing F32 weights as F16 or BF16 rounds each to nearest even; the same values stored in
  // that dtype (rounded independently: F16 by the hardware conversion, BF16 by comparing the
  // two neighbours' distances) must give a bitwise identical product.
  std::mt19937 rng(9);
  const int out = 37, in = 45, n = 3;
  Weights w(DType::F32, out, in, rng);
  const auto x = random_input(n, in, rng);
  for (DType to : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> stored(w.values.size());
    for (std::size_t i = 0; i < stored.size(); ++i) {
      if (to == DType::F16) {
        stored[i] = _cvtss_sh(w.values[i], _MM_FROUND_TO_NEAREST_INT);
      } else {
        stored[i] = bf16_nearest_even(w.values[i]);
      }
    }
    const TensorView view{"test.weight", to, {out, in}, stored.data(), "memory"};
    for (cpu::MatmulIsa isa : cpu::supported_matmul_isas()) {
      INFO(cpu::isa_name(isa) << " as " << dtype_name(to));
      const cpu::PackedWeights converted(w.view, isa, to), direct(view, isa);
      REQUIRE(converted.dtype() == to);
      std::vector<float> y1(static_cast<std::size_t>(n) * out), y2(y1.size());
      cpu::matmul(x.data(), converted, y1.data(), n);
      cpu::matmul(x.data(), direct, y2.data(), n);
      CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("matmul: weight_row upcasts every dtype exactly", "[engine][matmul]") {
  std::mt19937 rng(3);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    Weights w(dtype, 5, 13, rng);
    std::vector<float> row(13);
    for (int r = 0; r < 5; ++r) {
      cpu::weight_row(w.view, r, row.data());
      CHECK(std::memcmp(row.data(), &w.values[static_cast<std::size_t>(r) * 13], sizeof(float) * 13) == 0);
    }
  }
}

}  // namespace specula
