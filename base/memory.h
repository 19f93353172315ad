// defines: available_memory_bytes, the memory this process may still take, which the
// sizes users ask for (KV pools, checkpoint tensors) are checked against before allocating;
// ZeroedFloats, a zero-filled float array whose pages are touched only when used.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace specula {

// MemAvailable of /proc/meminfo, in bytes (the physical memory when that cannot be read).
long long available_memory_bytes();

// A zero-filled array of floats from calloc: a large one is fresh zero pages from the OS,
// so its cost is paid page by page as it is first touched, not all at construction (a KV
// pool sized for a whole batch costs nothing before the first step; docs/measurements.md,
// KV pool zero-fill). Throws std::bad_alloc when calloc fails.
class ZeroedFloats {
 public:
  ZeroedFloats() = default;
  explicit ZeroedFloats(std::size_t count);
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
};

}  // namespace specula
