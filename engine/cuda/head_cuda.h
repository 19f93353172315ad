// defines: make_cuda_head_backend and make_cuda_medusa_backend, the draft heads' seams
// (engine/head_backend.h, engine/medusa_backend.h) on GPU 0, in a CUDA-free header: the heads'
// matrices uploaded once in bf16, an EAGLE head's KV pages in device memory (its kv_layout()
// says device_pages), each forward the CUDA backend's kernels on the workspace's stream, the
// inputs uploaded and the results copied back. The program's versions (cuda_loader.cpp)
// forward to the CUDA module and refuse where it cannot be loaded.
#pragma once

#include <memory>

#include "engine/head_backend.h"
#include "engine/medusa_backend.h"

namespace specula::cuda {

// `head` for `target` (checked by make_head_backend). Throws SpeculaError when no GPU is
// usable or a dimension is one the kernels refuse (an inner dimension not a multiple of 8,
// head_dim odd or above 256).
std::unique_ptr<HeadBackend> make_cuda_head_backend(const HeadModel& head, const Model& target);

// `medusa` applying `target`'s final norm (checked by make_medusa_backend); refusals as above.
std::unique_ptr<MedusaBackend> make_cuda_medusa_backend(const MedusaModel& medusa, const Model& target);

}  // namespace specula::cuda
