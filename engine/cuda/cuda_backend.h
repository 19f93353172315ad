// defines: make_cuda_backend, the CUDA backend behind the engine seam (engine/backend.h), in a
// CUDA-free header: weights uploaded once in bf16, KV pages in device memory (kv_layout()
// says device_pages), the forward pass of engine/cuda/*.cu, decode steps replayed as CUDA
// graphs, memory planned at construction (cuda_plan.h). The program's version (cuda_loader.cpp)
// forwards to the CUDA module and refuses where it cannot be loaded or the build has no CUDA.
#pragma once

#include <memory>
#include <optional>

#include "engine/backend.h"
#include "engine/cuda/cuda_plan.h"

namespace specula::cuda {

// `model` on GPU 0. Throws SpeculaError when the build has no CUDA, no GPU is usable, or the
// model needs what the kernels refuse (check_cuda_support); ResourceExhausted when weights,
// one workspace and the KV pool do not fit (plan_memory names the sizes).
std::unique_ptr<Backend> make_cuda_backend(const Model& model, std::optional<MatrixFormat> matrices_as,
                                           const CudaOptions& options = {});

// The CUDA graphs the process holds: captured by any workspace and not yet destroyed (a
// workspace keeps at most CudaOptions::max_graphs, and drops those of caches that are gone).
// 0 without the module.
std::size_t cuda_live_graphs();

}  // namespace specula::cuda
