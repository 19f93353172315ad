// defines: poisson_arrivals(), the arrival times of a batched job's requests under
// run.request_rate: a Poisson process of `rate` requests per second, seeded.
#pragma once

#include <cstdint>
#include <vector>

namespace specula {

// [n] arrival times in seconds, non-decreasing: the first request at 0, then gaps drawn
// i.i.d. Exponential(rate) from Philox(seed, stream "ARRV") — the same times for the same
// (n, rate, seed), whatever the run. rate = 0: every request at 0 (all at once).
std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed);

}  // namespace specula
