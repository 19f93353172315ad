// defines: check_region (region_check.h) for the sanitized builds; nothing otherwise.
#include "base/region_check.h"

#if SPECULA_REGION_CHECKS
#include <sanitizer/asan_interface.h>

namespace specula {

// Out of line and instrumented: the read below is one ASan checks, whatever the caller's flags.
__attribute__((noinline)) void check_region(const void* begin, std::size_t bytes) {
  if (const void* bad = __asan_region_is_poisoned(const_cast<void*>(begin), bytes))
    (void)*static_cast<const volatile char*>(bad);  // ASan reports it and stops
}

}  // namespace specula
#endif
