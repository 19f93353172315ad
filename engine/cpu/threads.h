// defines: worth_threads, the one rule for when a CPU kernel opens an OpenMP region.
#pragma once

#include <omp.h>

namespace specula::cpu {

// Whether work whose one-thread time is estimated at `one_thread_ns` should be split across
// threads: opening an OpenMP region has a fixed cost of microseconds, paid even with one
// thread or an if(false) clause (docs/measurements.md, OpenMP regions), so below
// kParallelMinNs the work runs as a plain loop; never with one thread.
inline bool worth_threads(double one_thread_ns) {
  constexpr double kParallelMinNs = 8000;
  return omp_get_max_threads() > 1 && one_thread_ns > kParallelMinNs;
}

}  // namespace specula::cpu
