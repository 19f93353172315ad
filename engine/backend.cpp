#include "engine/backend.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"

namespace specula {

std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, std::optional<DType> matrices_as) {
  if (kind == BackendKind::kCpu) return std::make_unique<cpu::CpuBackend>(model, matrices_as);
  return cuda::make_cuda_backend(model, matrices_as);  // refuses without CUDA or a GPU
}

}  // namespace specula
