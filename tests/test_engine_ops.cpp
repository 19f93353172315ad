// cpu::silu_mul (8 lanes at a time with a polynomial exp, the tail padded) against a double
// reference, over counts with and without a tail and gate values across and beyond the
// exp clamp (|g| up to 120).
//
// Error bound: the exp is within 2 ulp, and the subtraction, add, divide and multiply each
// round once, so the result is within ~8 ulp (8 * 2^-24 relative) of silu(g) * u; where
// e^-g overflows f32 (g < -88) the reference is below 1e-36 and ours (g / e^88 * u) below
// 1e-35. A wrong sign, a dropped lane or a mishandled tail is off by orders more.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"

namespace specula {

TEST_CASE("silu_mul equals silu(g) * u in double precision", "[engine][ops]") {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> gate_value(-120.0f, 120.0f), up_value(-2.0f, 2.0f);
  std::normal_distribution<float> typical(0.0f, 3.0f);
  for (int count : {1, 7, 8, 13, 1024, 1031}) {
    std::vector<float> gate(static_cast<std::size_t>(count)), up(gate.size());
    for (int i = 0; i < count; ++i) {
      gate[i] = i % 2 ? gate_value(rng) : typical(rng);
      up[i] = up_value(rng);
    }
    std::vector<float> out = gate;
    cpu::silu_mul(out.data(), up.data(), count);
    for (int i = 0; i < count; ++i) {
      INFO("count " << count << " g " << gate[i] << " u " << up[i]);
      const double g = gate[i], ref = g / (1.0 + std::exp(-g)) * up[i];
      CHECK(std::abs(out[i] - ref) <= 8 * std::ldexp(std::abs(ref), -24) + 1e-35);
    }
  }
}

}  // namespace specula
