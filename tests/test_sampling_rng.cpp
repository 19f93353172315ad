// Philox4x32-10 against the published Random123 known-answer vectors (kat_vectors), and the
// way uniform() turns blocks into doubles.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>

#include "base/rng.h"

using specula::Philox;

namespace {

// Philox(seed, stream).block(index) is the raw bijection with key = {seed lo, seed hi} and
// counter = {index lo, index hi, stream lo, stream hi}.
std::array<uint32_t, 4> philox(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  const uint64_t seed = uint64_t(key[1]) << 32 | key[0];
  const uint64_t stream = uint64_t(counter[3]) << 32 | counter[2];
  const uint64_t index = uint64_t(counter[1]) << 32 | counter[0];
  return Philox(seed, stream).block(index);
}

}  // namespace

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors", "[sampling]") {
  using Words = std::array<uint32_t, 4>;
  CHECK(philox({0, 0, 0, 0}, {0, 0}) == Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("Philox uniforms take 53 bits from each half block, in order", "[sampling]") {
  Philox rng(0, 0);
  auto expected = [](uint32_t hi, uint32_t lo) { return double((uint64_t(hi) << 32 | lo) >> 11) * 0x1.0p-53; };
  CHECK(rng.draws() == 0);
  CHECK(rng.uniform() == expected(0x6627e8d5, 0xe169c58d));
  CHECK(rng.draws() == 1);
  CHECK(rng.uniform() == expected(0xbc57ac4c, 0x9b00dbd8));
  CHECK(rng.draws() == 2);
  const auto block1 = Philox(0, 0).block(1);
  CHECK(rng.uniform() == expected(block1[0], block1[1]));
  CHECK(rng.draws() == 3);
}

TEST_CASE("Philox streams are pure functions of (seed, stream)", "[sampling]") {
  Philox a(42, 7), b(42, 7), other_stream(42, 8), other_seed(43, 7);
  for (int i = 0; i < 100; ++i) {
    const double u = a.uniform();
    CHECK(u == b.uniform());
    CHECK(u != other_stream.uniform());
    CHECK(u != other_seed.uniform());
    CHECK((u >= 0.0 && u < 1.0));
  }
}
