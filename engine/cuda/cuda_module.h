// defines: CudaModule, the entry points of the CUDA backend's shared module (libspecula_cuda.so),
// and kCudaModuleSymbol, the one symbol the program looks up in it. The program loads the module
// (cuda_loader.cpp) only when something asks for CUDA (a device count, the cuda backend, the
// kernel harness), so a CPU run never maps the CUDA runtime or cuBLASLt. Both sides are built
// from these headers by the same build, and the loader refuses a module whose abi_version or
// size differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/head_backend.h"
#include "engine/medusa_backend.h"
#include "engine/cuda/cuda_plan.h"
#include "engine/cuda/kernel_harness.h"

namespace specula::cuda {

inline constexpr int kCudaModuleAbi = 18;
inline constexpr const char* kCudaModuleSymbol = "specula_cuda_module";

// Each member is the function of the same name in device.h, cuda_backend.h, head_cuda.h or
// kernel_harness.h (make_head_backend: make_cuda_head_backend, and so on).
struct CudaModule {
  int abi_version;
  std::size_t size;  // sizeof(CudaModule) where the module was built
  int (*device_count)();
  std::string (*unavailable_reason)();
  std::string (*device_name)();
  double (*copy_bandwidth)(std::size_t bytes, int reps);
  std::unique_ptr<Backend> (*make_backend)(const Model& model, std::optional<MatrixFormat> matrices_as,
                                           const CudaOptions& options);
  std::size_t (*live_graphs)();
  std::unique_ptr<HeadBackend> (*make_head_backend)(const HeadModel& head, const Model& target);
  std::unique_ptr<MedusaBackend> (*make_medusa_backend)(const MedusaModel& medusa, const Model& target);
  std::vector<float> (*embed)(const TensorView& table, std::span<const int> tokens);
  std::vector<float> (*rms_norm)(std::span<const float> x, std::span<const float> weight, float eps, int n, int dim);
  std::vector<float> (*silu_mul)(std::span<const float> gate_up, int n, int ffn);
  std::vector<float> (*matmul)(std::span<const float> x, std::span<const std::uint16_t> w, std::span<const float> bias,
                               std::span<const float> y_in, int n, int in, int out, bool accumulate,
                               harness::MatmulPath path);
  std::vector<float> (*qk_rope_store)(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages,
                                      DType page_dtype, int layer, std::span<const float> qkv,
                                      std::span<const float> inv_freq, std::span<const float> q_norm,
                                      std::span<const float> k_norm, float eps, int num_heads);
  std::vector<float> (*attention)(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages,
                                  DType page_dtype, int layer, int num_heads, int window, std::span<const float> q);
  void (*kv_copies)(std::span<const KvCopy> copies, PageStorage& pages, DType page_dtype);
  harness::TreeVerdicts (*verify_tree)(const harness::TreeBatch& batch, bool greedy);
  harness::SampledRows (*sample)(const harness::SamplingBatch& batch);
  std::vector<int> (*draw_children)(const harness::ChildrenBatch& batch);
  std::vector<float> (*edit_logits)(const harness::EditBatch& batch);
  harness::DynamicGrowth (*grow_dynamic)(const harness::DynamicBatch& batch);
  std::vector<std::int32_t> (*tree_rows)(const harness::TreeRowsBatch& batch);
};

// The module's one exported function (extern "C", named kCudaModuleSymbol).
using CudaModuleEntry = const CudaModule* (*)();

}  // namespace specula::cuda
