// The module's one exported symbol: the table of its entry points (cuda_module.h).
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_module.h"
#include "engine/cuda/device.h"
#include "engine/cuda/head_cuda.h"

namespace {

constexpr specula::cuda::CudaModule kModule = {
    specula::cuda::kCudaModuleAbi,
    sizeof(specula::cuda::CudaModule),
    &specula::cuda_device_count,
    &specula::cuda_unavailable_reason,
    &specula::cuda_device_name,
    &specula::cuda_copy_bandwidth,
    &specula::cuda::make_cuda_backend,
    &specula::cuda::cuda_live_graphs,
    &specula::cuda::make_cuda_head_backend,
    &specula::cuda::make_cuda_medusa_backend,
    &specula::cuda::harness::embed,
    &specula::cuda::harness::rms_norm,
    &specula::cuda::harness::silu_mul,
    &specula::cuda::harness::matmul,
    &specula::cuda::harness::qk_rope_store,
    &specula::cuda::harness::attention,
    &specula::cuda::harness::kv_copies,
    &specula::cuda::harness::verify_tree,
    &specula::cuda::harness::sample,
    &specula::cuda::harness::draw_children,
    &specula::cuda::harness::edit_logits,
    &specula::cuda::harness::grow_dynamic,
    &specula::cuda::harness::tree_rows,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const specula::cuda::CudaModule* specula_cuda_module() {
  return &kModule;
}
