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

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16dot.h"
#include "engine/cpu/matmul_int8.h"
#include "tests/test_engine_support.h"

#if SPECULA_REGION_CHECKS
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <memory>
#endif

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
        for (int n : {1, 2, 3, 5, 8, 17, 64}) {
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

TEST_CASE("matmul: a row of an n-row product is bitwise the row computed alone, on every ISA and thread count",
          "[engine][matmul]") {
  // Each output is one FMA chain over k in order (matmul.h), so the rows of any product equal
  // the rows computed one at a time on the narrowest ISA with one thread, bit for bit: every
  // row count 1..64 on a small shape (every tail of every ISA's row tiles, a partial last
  // block, an odd in), and awkward counts on one split across threads (1031 outputs: a
  // partial last block; in = 384: several k-ranges).
  struct Case {
    int out, in;
    std::vector<int> counts;
  };
  std::vector<int> every(64);
  for (int n = 1; n <= 64; ++n) every[static_cast<std::size_t>(n - 1)] = n;
  const std::vector<Case> cases{{130, 45, every}, {7, 13, {1, 2, 5}}, {1031, 384, {3, 7, 13, 63}}};
  std::mt19937 rng(11);
  const int threads_before = omp_get_max_threads();
  const cpu::MatmulIsa narrowest = cpu::supported_matmul_isas().front();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (const Case& c : cases) {
      Weights w(dtype, c.out, c.in, rng);
      const int rows = *std::max_element(c.counts.begin(), c.counts.end());
      const auto x = random_input(rows, c.in, rng);
      const std::size_t out = static_cast<std::size_t>(c.out);
      std::vector<float> alone(static_cast<std::size_t>(rows) * out);
      omp_set_num_threads(1);
      const cpu::PackedWeights reference(w.view, narrowest);
      for (int r = 0; r < rows; ++r)
        cpu::matmul(&x[static_cast<std::size_t>(r) * c.in], reference, &alone[r * out], 1);
      for (cpu::MatmulIsa isa : cpu::supported_matmul_isas()) {
        const cpu::PackedWeights packed(w.view, isa);
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          for (int n : c.counts) {
            INFO(cpu::isa_name(isa) << ' ' << dtype_name(dtype) << " threads=" << threads << " n=" << n
                                    << " in=" << c.in << " out=" << c.out);
            std::vector<float> y(static_cast<std::size_t>(n) * out);
            cpu::matmul(x.data(), packed, y.data(), n);
            CHECK(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  omp_set_num_threads(threads_before);
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
    const int out = 70, in = 45;  // a partial last block and an odd in (a BF16 step with one value)
    Weights w(dtype, out, in, rng);
    const cpu::PackedWeights packed(w.view, isa);
    const int64_t es = static_cast<int64_t>(dtype_size(dtype)), block = cpu::block_outputs(isa);
    const int64_t pair = dtype == DType::BF16 ? 2 : 1, steps = (in + pair - 1) / pair;
    REQUIRE(packed.blocks() == (out + block - 1) / block);
    REQUIRE(packed.block_bytes() == steps * block * pair * es);
    const auto* src = static_cast<const unsigned char*>(w.view.data);
    for (int64_t b = 0; b < packed.blocks(); ++b)
      for (int64_t s = 0; s < steps; ++s)
        for (int64_t o = 0; o < block; ++o)
          for (int64_t j = 0; j < pair; ++j) {
            const int64_t row = b * block + o, k = s * pair + j;
            const unsigned char* at = packed.block_data(b) + ((s * block + o) * pair + j) * es;
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
        stored[i] = test::bf16_nearest_even(w.values[i]);
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

#if SPECULA_REGION_CHECKS
// The sanitized builds compile the tile units without ASan's per-access checks and check each
// tile's ranges instead (base/region_check.h). A buffer one float short must still stop the
// run, as a checked load would: each product runs in a child process (stderr discarded), once
// with exact buffers (exits 0) and once with one buffer short (ASan stops it).
namespace {

bool child_exits_cleanly(const std::function<void()>& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    body();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A heap copy of v with `drop` elements cut off its end, so that ASan's redzone follows it.
std::unique_ptr<float[]> heap_copy(const std::vector<float>& v, std::size_t drop) {
  std::unique_ptr<float[]> p(new float[v.size() - drop]);
  std::copy_n(v.begin(), v.size() - drop, p.get());
  return p;
}

}  // namespace

TEST_CASE("sanitized builds: the tiles without per-load checks still stop on a buffer one float short",
          "[engine][matmul]") {
  std::mt19937 rng(5);
  constexpr int kOut = 33, kIn = 40, kRows = 5;
  const std::vector<float> x = random_input(kRows, kIn, rng), y(static_cast<std::size_t>(kRows) * kOut);
  for (cpu::MatmulIsa isa : cpu::supported_matmul_isas())
    for (DType dtype : {DType::F32, DType::BF16}) {
      INFO(cpu::isa_name(isa) << ' ' << dtype_name(dtype) << ": x one float short");
      Weights w(dtype, kOut, kIn, rng);
      const cpu::PackedWeights packed(w.view, isa);
      const auto product = [&](std::size_t x_drop) {
        return [&, x_drop] {
          const auto xs = heap_copy(x, x_drop);
          auto ys = heap_copy(y, 0);
          cpu::matmul(xs.get(), packed, ys.get(), kRows);
        };
      };
      CHECK(child_exits_cleanly(product(0)));
      CHECK_FALSE(child_exits_cleanly(product(1)));
    }
  Weights w(DType::BF16, kOut, kIn, rng);
  const cpu::PackedInt8 packed(w.view);
  cpu::QuantizedRows q;
  cpu::quantize_rows(x.data(), kRows, kIn, q);
  for (const bool vnni : {false, true}) {
    if (vnni && cpu::int8_kernel(cpu::MatmulIsa::avx512) != cpu::Int8Kernel::vnni) continue;
    INFO((vnni ? "vnni" : "avx2") << ": y one float short");
    const auto product = [&](std::size_t y_drop) {
      return [&, y_drop] {
        auto ys = heap_copy(y, y_drop);
        (vnni ? cpu::matmul_int8_vnni : cpu::matmul_int8_avx2)(q, packed, ys.get(), kRows);
      };
    };
    CHECK(child_exits_cleanly(product(0)));
    CHECK_FALSE(child_exits_cleanly(product(1)));
  }
  std::vector<uint32_t> pairs;
  cpu::bf16dot_round_rows(x.data(), kRows, kIn, pairs);
  for (cpu::Bf16DotKernel kernel : cpu::supported_bf16dot_kernels()) {
    INFO("bf16dot " << cpu::bf16dot_kernel_name(kernel) << ": y one float short");
    const cpu::PackedWeights bf16(w.view, cpu::bf16dot_kernel_isa(kernel), DType::BF16, true);
    const auto product = [&](std::size_t y_drop) {
      return [&, y_drop] {
        auto ys = heap_copy(y, y_drop);
        switch (kernel) {
          case cpu::Bf16DotKernel::avx2: return cpu::matmul_bf16dot_avx2(pairs.data(), bf16, ys.get(), kRows);
          case cpu::Bf16DotKernel::avx512: return cpu::matmul_bf16dot_avx512(pairs.data(), bf16, ys.get(), kRows);
          case cpu::Bf16DotKernel::avx512bf16:
            return cpu::matmul_bf16dot_avx512bf16(pairs.data(), bf16, ys.get(), kRows);
        }
      };
    };
    CHECK(child_exits_cleanly(product(0)));
    CHECK_FALSE(child_exits_cleanly(product(1)));
  }
}
#endif

}  // namespace specula
