// defines: available_memory_bytes, the memory this process may still take, which the
// sizes users ask for (KV pools, checkpoint tensors) are checked against before allocating.
#pragma once

namespace specula {

// MemAvailable of /proc/meminfo, in bytes (the physical memory when that cannot be read).
long long available_memory_bytes();

}  // namespace specula
