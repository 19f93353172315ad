#include "experiments/arrivals.h"

#include <cmath>

#include "base/rng.h"

namespace specula {

std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed) {
  std::vector<double> at(static_cast<std::size_t>(n), 0.0);
  if (rate <= 0) return at;
  Philox rng(seed, 0x41525256);  // "ARRV": apart from every sample stream
  for (std::size_t i = 1; i < at.size(); ++i) at[i] = at[i - 1] - std::log1p(-rng.uniform()) / rate;
  return at;
}

}  // namespace specula
