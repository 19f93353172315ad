// defines: the [gpu] tests' guards: host_execution(), true where the CUDA sources' host
// execution (engine/cuda/host) runs them (its sweeps are sized for a CPU, where a case would
// otherwise take minutes), and REQUIRE_GPU(), which ends a test case with the printed reason
// where no GPU is usable (gpu-check.sh counts such a case as skipped).
#pragma once

#include <catch2/catch.hpp>

#include "engine/cuda/device.h"

namespace specula::test {

inline bool host_execution() { return cuda_device_name() == "specula host execution"; }

}  // namespace specula::test

#define REQUIRE_GPU()                                                            \
  do {                                                                           \
    if (::specula::cuda_device_count() == 0) {                                   \
      WARN("skipped: no GPU (" << ::specula::cuda_unavailable_reason() << ")");  \
      return;                                                                    \
    }                                                                            \
  } while (0)
