// defines: lane_sum, the sum of a span in double in a fixed order that vectorises (8
// interleaved partial sums, then the tail): the totals of the samplers' inverse-CDF draws.
#pragma once

#include <cstddef>
#include <span>

namespace specula {

template <typename T>
double lane_sum(std::span<const T> values) {
  double partial[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= values.size(); i += 8)
    for (std::size_t lane = 0; lane < 8; ++lane) partial[lane] += values[i + lane];
  double total = 0.0;
  for (double p : partial) total += p;
  for (; i < values.size(); ++i) total += values[i];
  return total;
}

}  // namespace specula
