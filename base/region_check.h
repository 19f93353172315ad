// defines: check_region, the one way a kernel compiled without AddressSanitizer's per-access
// checks still has its memory checked in the sanitized builds.
//
// The matrix-product tile units (engine/cpu/matmul_*.cpp) are compiled with
// -fno-sanitize=address in those builds (engine/CMakeLists.txt): ASan's check on every load
// costs about one check per two FMAs there (docs/measurements.md, Sanitized builds).
// Instead each tile calls check_region on every range it will read or write, once per call,
// before its loop. A range that is out of bounds, freed or otherwise poisoned stops the run
// with ASan's own report (a read of the first bad byte, with the kernel's stack), as a
// checked load would have. Without SPECULA_REGION_CHECKS (every optimised build) it is nothing.
#pragma once

#include <cstddef>

namespace specula {

#if SPECULA_REGION_CHECKS
// base/region_check.cpp, compiled with ASan.
void check_region(const void* begin, std::size_t bytes);
#else
inline void check_region(const void*, std::size_t) {}
#endif

}  // namespace specula
