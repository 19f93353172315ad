// The bf16amx product (engine/cpu/matmul_bf16amx.h): each row of an n-row product equal to
// that row alone at any row count (every tail of the 16-row tiles), tile position and thread
// count; the error against the exact double product within the bound of bf16dot's roundings
// and f32 summation; on the bundled models, logits close to the stored-dtype forward's, and
// greedy speculative decoding with a bf16amx target equal to plain greedy decoding with it.
// Where the process cannot run AMX tiles, the format is refused naming why, and the rest is
// skipped with a warning.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/matmul_bf16amx.h"
#include "engine/cpu/matmul_bf16dot.h"
#include "runtime/generate_options.h"
#include "tests/test_format_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

// True where the tiles run; otherwise a warning saying why the caller's checks are skipped.
bool amx_runs() {
  if (cpu::bf16amx_unsupported().empty()) return true;
  WARN("skipped: " << cpu::bf16amx_unsupported());
  return false;
}

cpu::PackedWeights pack(const test::RandomWeights& w) {
  return cpu::PackedWeights(w.view, cpu::MatmulIsa::avx512, DType::BF16, true, cpu::kAmxPairsPerTile);
}

}  // namespace

TEST_CASE("bf16amx: refused with the reason where the process cannot run AMX tiles", "[engine][bf16amx]") {
  if (cpu::bf16amx_unsupported().empty()) {
    WARN("this process runs AMX tiles: the refusal is not exercised");
    return;
  }
  const Model& model = test::store().model(test::model_dir("draft-1m"));
  CHECK_THROWS_WITH(cpu::CpuBackend(model, MatrixFormat::kBF16Amx), Catch::Contains("bf16amx weights: ") &&
                                                                Catch::Contains(cpu::bf16amx_unsupported()));
  GenerateOptions o;
  o.model_dir = test::model_dir("draft-1m");
  o.weights = MatrixFormat::kBF16Amx;
  CHECK_THROWS_WITH(validate_options(o, cli_option_names()), Catch::StartsWith("--weights bf16amx: "));
}

TEST_CASE("bf16amx: a row of an n-row product is bitwise the row computed alone, at any row and thread count",
          "[engine][matmul][bf16amx]") {
  if (!amx_runs()) return;
  // Every row count 1..20 and a few to 64 (every tail of the 16-row tiles; a row sits at a
  // different tile position in each) on an in that pads its last tile and a partial last block;
  // awkward counts on 1031 x 384 (split across threads). The reference: each row alone, one thread.
  struct Case {
    int out, in;
    std::vector<int> counts;
  };
  std::vector<int> counts(20);
  std::iota(counts.begin(), counts.end(), 1);
  for (int n : {24, 31, 33, 40, 64}) counts.push_back(n);
  const Case cases[] = {{130, 45, counts}, {1031, 384, {3, 17, 63}}};
  std::mt19937 rng(23);
  const int threads_before = omp_get_max_threads();
  for (const Case& c : cases) {
    const test::RandomWeights w(DType::F32, c.out, c.in, rng);
    const cpu::PackedWeights packed = pack(w);
    const int rows = *std::max_element(c.counts.begin(), c.counts.end());
    const std::vector<float> x = test::random_rows(rows, c.in, rng);
    const std::size_t out = static_cast<std::size_t>(c.out);
    std::vector<float> alone(static_cast<std::size_t>(rows) * out);
    omp_set_num_threads(1);
    for (int r = 0; r < rows; ++r) cpu::matmul_bf16amx(&x[static_cast<std::size_t>(r) * c.in], packed, &alone[r * out], 1);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (int n : c.counts) {
        INFO("threads=" << threads << " n=" << n << " " << c.out << "x" << c.in);
        std::vector<float> y(static_cast<std::size_t>(n) * out);
        cpu::matmul_bf16amx(x.data(), packed, y.data(), n);
        CHECK(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)) == 0);
      }
    }
  }
  omp_set_num_threads(threads_before);
}

TEST_CASE("bf16amx: the product is within the bound of its roundings and f32 summation", "[engine][matmul][bf16amx]") {
  if (!amx_runs()) return;
  // Two checks per element: against the exact product of x and w as given, the bound of
  // matmul_bf16amx.h; and, so that the bound's rounding term cannot hide the tiles' own sums,
  // against the exact product of the rounded operands, its summation term alone.
  std::mt19937 rng(29);
  const auto rounded = [](float v) { return double(test::bf16_value(cpu::bf16dot_round(v))); };
  double worst_ratio = 0, worst_summation = 0;
  for (const auto& [out, in] : {std::pair{48, 512}, std::pair{33, 1001}}) {
    const int n = 19;
    const test::RandomWeights w(DType::F32, out, in, rng);
    const std::vector<float> x = test::random_rows(n, in, rng);
    std::vector<float> y(static_cast<std::size_t>(n) * out);
    cpu::matmul_bf16amx(x.data(), pack(w), y.data(), n);
    for (int r = 0; r < n; ++r)
      for (int o = 0; o < out; ++o) {
        double exact = 0, magnitude = 0, exact_rounded = 0, magnitude_rounded = 0;
        for (int k = 0; k < in; ++k) {
          const float xk = x[r * in + k], wk = w.values[static_cast<std::size_t>(o) * in + k];
          exact += double(xk) * wk;
          magnitude += std::fabs(double(xk) * wk);
          exact_rounded += rounded(xk) * rounded(wk);
          magnitude_rounded += std::fabs(rounded(xk) * rounded(wk));
        }
        const double m = 32.0 * ((in + 31) / 32), u = std::ldexp(1.0, -24);
        const double err = std::fabs(y[r * out + o] - exact), bound = cpu::bf16amx_error_bound(magnitude, in);
        const double summation_err = std::fabs(y[r * out + o] - exact_rounded);
        const double summation_bound = m * u / (1 - m * u) * magnitude_rounded;
        INFO(out << "x" << in << " r=" << r << " o=" << o << ": |error| " << err << " bound " << bound
                 << "; against the rounded operands " << summation_err << " bound " << summation_bound);
        REQUIRE(err <= bound);
        REQUIRE(summation_err <= summation_bound);
        worst_ratio = std::max(worst_ratio, err / bound);
        worst_summation = std::max(worst_summation, summation_err / summation_bound);
      }
  }
  // Not vacuous: the worst element uses a fair share of its bound (measured: 0.40, and 0.004
  // of the summation term alone: the tiles' sums lose far less than m sequential f32 additions
  // could).
  INFO("worst |error| / bound " << worst_ratio << ", summation alone " << worst_summation);
  CHECK(worst_ratio > 0.1);
  CHECK(worst_summation > 0);
}

TEST_CASE("bf16amx logits stay close to the stored-dtype forward on the bundled models", "[engine][bf16amx]") {
  if (!amx_runs()) return;
  // bf16dot's bounds (the same operand roundings): max |logit difference| <= 2% of the largest
  // |logit|, top-1 agreement on >= 95% of the rows.
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) {
    const Model& model = test::store().model(test::model_dir(name));
    const cpu::CpuBackend stored(model, std::nullopt), bf16amx(model, MatrixFormat::kBF16Amx);
    test::check_close_to_stored(name, stored, bf16amx, 0.02, 0.95);
  }
}

TEST_CASE("greedy speculative output equals plain greedy output with a bf16amx target", "[engine][bf16amx][speculative]") {
  if (!amx_runs()) return;
  test::check_greedy_speculation(MatrixFormat::kBF16Amx, test::drafts_in_format(MatrixFormat::kBF16Amx));
}

}  // namespace specula
