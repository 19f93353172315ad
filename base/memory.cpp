#include "base/memory.h"

#include <unistd.h>

#include <climits>
#include <fstream>
#include <new>
#include <string>

namespace specula {

long long available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(LLONG_MAX, '\n');
  }
  return static_cast<long long>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

ZeroedFloats::ZeroedFloats(std::size_t count) : size_(count) {
  if (count == 0) return;
  data_.reset(static_cast<float*>(std::calloc(count, sizeof(float))));
  if (!data_) throw std::bad_alloc();
}

}  // namespace specula
