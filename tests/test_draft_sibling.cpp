// draw_siblings: top-k order and ties, exhaustion, random-number use, and the exact joint
// distribution of the first two children in the two random modes (chi-square, alpha 1e-3).
#include <catch2/catch.hpp>
#include <set>

#include "draft/sibling_draw.h"
#include "base/error.h"
#include "test_verify_support.h"

namespace specula {

TEST_CASE("top-k siblings: most probable first, ties to the lowest id, zeros never proposed", "[draft]") {
  const std::vector<float> q = {0.2f, 0.3f, 0.2f, 0.3f, 0.0f};
  Philox rng(1);
  CHECK(draw_siblings(q, 3, SiblingDraw::kTopK, rng) == std::vector<int>{1, 3, 0});
  CHECK(draw_siblings(q, 1, SiblingDraw::kTopK, rng) == std::vector<int>{1});
  CHECK(draw_siblings(q, 10, SiblingDraw::kTopK, rng) == std::vector<int>{1, 3, 0, 2});
  CHECK(draw_siblings(q, 0, SiblingDraw::kTopK, rng).empty());
  CHECK(rng.draws() == 0);
  CHECK_THROWS_AS(draw_siblings(q, -1, SiblingDraw::kTopK, rng), SpeculaError);
}

TEST_CASE("random siblings: one uniform per child, distinct without replacement, stop when q is exhausted", "[draft]") {
  const std::vector<float> q = {0.0f, 0.5f, 0.0f, 0.5f};
  Philox rng(3);
  CHECK(draw_siblings(q, 3, SiblingDraw::kSampled, rng).size() == 3);
  CHECK(rng.draws() == 3);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<int> c = draw_siblings(q, 4, SiblingDraw::kWithoutReplacement, rng);
    CHECK(std::set<int>(c.begin(), c.end()) == std::set<int>{1, 3});
  }
  Philox a(5), b(5);
  const std::vector<float> dense = {0.1f, 0.2f, 0.3f, 0.4f};
  CHECK(draw_siblings(dense, 3, SiblingDraw::kWithoutReplacement, a) ==
        draw_siblings(dense, 3, SiblingDraw::kWithoutReplacement, b));
}

TEST_CASE("random siblings follow the exact i.i.d. and without-replacement laws", "[draft]") {
  // Cells: ordered pairs (x1, x2) of the first two children, N = 20000, alpha = 1e-3.
  // i.i.d.: P = q(a) q(b). Without replacement: P = q(a) q(b) / (1 - q(a)), 0 on a = b.
  // Power: the i.i.d. law tested against without-replacement draws puts 30% of the mass
  // on the 4 diagonal cells (lambda ~ 6000 at N = 20000: detected with certainty), and any
  // repeated child under without-replacement is caught exactly by `impossible`.
  const std::vector<float> q = {0.1f, 0.2f, 0.3f, 0.4f};
  const long n = 20000;
  for (SiblingDraw mode : {SiblingDraw::kSampled, SiblingDraw::kWithoutReplacement}) {
    std::vector<long> counts(16, 0);
    Philox rng(mode == SiblingDraw::kSampled ? 10 : 11);
    for (long s = 0; s < n; ++s) {
      const std::vector<int> c = draw_siblings(q, 2, mode, rng);
      ++counts[c[0] * 4 + c[1]];
    }
    std::vector<double> probs;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        probs.push_back(mode == SiblingDraw::kSampled ? double(q[a]) * q[b]
                        : a == b                      ? 0.0
                                                      : double(q[a]) * q[b] / (1.0 - q[a]));
    const test::ChiSquare r = test::chi_square(counts, probs);
    INFO("mode " << int(mode) << ": X2 = " << r.statistic << ", df = " << r.df << ", p = " << r.p_value);
    CHECK(r.impossible == 0);
    CHECK(r.p_value > 1e-3);
  }
}

}  // namespace specula
