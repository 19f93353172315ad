#include "engine/backend.h"

#include "base/error.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/device.h"

namespace specula {

const char* backend_name(BackendKind kind) { return kind == BackendKind::kCpu ? "cpu" : "cuda"; }

std::optional<BackendKind> parse_backend(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return std::nullopt;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, std::optional<DType> matrices_as) {
  if (kind == BackendKind::kCpu) return std::make_unique<cpu::CpuBackend>(model, matrices_as);
  const std::string device = cuda_device_count() > 0 ? "a GPU is present" : cuda_unavailable_reason();
  throw SpeculaError(detail::concat("backend 'cuda': the CUDA forward pass is not implemented yet (", device,
                                    "); use --backend cpu"));
}

}  // namespace specula
