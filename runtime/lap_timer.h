// defines: Clock and lap(), the phase timer of the decoding loops: seconds since `mark`, and
// `mark` moved to now, so consecutive laps add up to the whole.
#pragma once

#include <chrono>

namespace specula {

using Clock = std::chrono::steady_clock;

inline double lap(Clock::time_point& mark) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

}  // namespace specula
