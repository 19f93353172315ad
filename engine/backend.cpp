#include "engine/backend.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/matmul_bf16amx.h"
#include "engine/cuda/cuda_backend.h"

namespace specula {

std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, std::optional<MatrixFormat> matrices_as) {
  if (kind == BackendKind::kCpu) return std::make_unique<cpu::CpuBackend>(model, matrices_as);
  return cuda::make_cuda_backend(model, matrices_as);  // refuses without CUDA or a GPU
}

std::string matrices_unsupported(BackendKind kind, std::optional<MatrixFormat> matrices_as) {
  if (kind != BackendKind::kCpu || matrices_as != MatrixFormat::kBF16Amx || cpu::bf16amx_unsupported().empty())
    return "";
  return cpu::bf16amx_unsupported() + "; bf16dot is the same operands on any CPU";
}

}  // namespace specula
