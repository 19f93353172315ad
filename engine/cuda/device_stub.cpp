// The CPU-only build: no CUDA compiler was found at configure time.
#include "engine/cuda/device.h"

namespace specula {

int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "built without CUDA (nvcc not found at configure time)"; }

}  // namespace specula
