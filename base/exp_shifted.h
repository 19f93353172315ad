// defines: exp_nonpositive and exp_shifted, e^d for d <= 0 (softmax numerators) in float
// arithmetic that vectorises, in place of a libm call per element: d = n ln 2 + r with n
// rounded to nearest and ln 2 in two parts, e^r by a degree-6 polynomial on |r| <= ln 2 / 2
// (Cephes' expf coefficients), 2^n applied in two halves so that denormal results stay in
// range. Within 1 ulp of std::exp on [-87, 0] (tests/test_sampling_transforms.cpp), exactly
// 0 below -103.97 (where std::exp rounds to 0) and for -inf. Selects are bit masks, not
// branches: GCC does not if-convert a float `?:` without -ffast-math, and a branch keeps the
// loop scalar.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace specula {

inline float exp_nonpositive(float d) {
  constexpr float kLowest = -103.97f;
  // For d <= 0 the bit patterns order by magnitude: below kLowest (and -inf) is the larger.
  const uint32_t bits = std::bit_cast<uint32_t>(d), lowest = std::bit_cast<uint32_t>(kLowest);
  const uint32_t below = 0u - static_cast<uint32_t>(bits > lowest);  // all ones where d < kLowest
  const float x = std::bit_cast<float>((bits & ~below) | (lowest & below));
  // n = round(x / ln 2): adding 1.5 * 2^23 leaves n in the low mantissa bits.
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // 2^n = 2^h 2^(n - h), h = n / 2: both halves normal for n >= -150.
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const int32_t h = ni >> 1;
  const float value = er * std::bit_cast<float>((h + 127) << 23) * std::bit_cast<float>((ni - h + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(value) & ~below);
}

// out[i] = e^(x[i] - shift), every x[i] <= shift (or -inf).
//   x: in [n]; out: out [n] (may be x)
inline void exp_shifted(std::span<const float> x, float shift, std::span<float> out) {
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = exp_nonpositive(x[i] - shift);
}

}  // namespace specula
