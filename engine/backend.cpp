#include "engine/backend.h"

#include "base/error.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/device.h"

namespace specula {

std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, std::optional<DType> matrices_as) {
  if (kind == BackendKind::kCpu) return std::make_unique<cpu::CpuBackend>(model, matrices_as);
  const std::string device = cuda_device_count() > 0 ? "a GPU is present" : cuda_unavailable_reason();
  throw SpeculaError(detail::concat("backend 'cuda': the CUDA forward pass is not implemented yet (", device,
                                    "); use --backend cpu"));
}

}  // namespace specula
