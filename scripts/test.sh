#!/usr/bin/env bash
# The test command (README, .ci/run): installs and builds, then runs the whole suite twice:
# an optimised build, and an AddressSanitizer + UndefinedBehaviorSanitizer build in which
# leaks fail the run. Tests tagged [gpu] skip with a printed reason when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
# ctest runs one test per core; each test keeps to one OpenMP thread so that the cores are
# not oversubscribed (spinning OpenMP barriers collapse when they are). Results do not depend
# on the thread count (docs/architecture.md, batch invariance).
export OMP_NUM_THREADS=1

scripts/setup.sh build
(cd build && ctest --output-on-failure -j "$jobs")

# Line tables (-g1) are all ASan's reports need, at a fraction of full debug info's cost.
scripts/setup.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DSPECULA_SANITIZE=ON -DSPECULA_ENABLE_CUDA=OFF -DSPECULA_BUILD_BENCH=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j "$jobs")

# After the suites: each fuzz target for 30 s (skips with a message without clang's libFuzzer).
scripts/fuzz.sh 30 build-fuzz
