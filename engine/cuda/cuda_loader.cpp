// The program's side of the CUDA backend: device.h, cuda_backend.h and kernel_harness.h forward
// to the shared module (cuda_module.h), loaded with dlopen on the first call that needs it. A
// module that cannot be loaded, or a build without CUDA, reads as "no GPU" with the reason.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "base/error.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module.h"
#include "engine/cuda/device.h"
#include "engine/cuda/head_cuda.h"
#include "engine/cuda/kernel_harness.h"

namespace specula {
namespace {

struct LoadedModule {
  const cuda::CudaModule* module = nullptr;
  std::string error;  // why `module` is null
};

std::atomic<bool> g_loaded{false};

LoadedModule load(const std::string& path) {
  if (path.empty()) return {nullptr, "built without CUDA (SPECULA_ENABLE_CUDA off, or nvcc not found at configure time)"};
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return {nullptr, std::string("cannot load the CUDA module: ") + dlerror()};
  const auto entry = reinterpret_cast<cuda::CudaModuleEntry>(dlsym(handle, cuda::kCudaModuleSymbol));
  if (entry == nullptr) return {nullptr, "CUDA module " + path + " has no " + cuda::kCudaModuleSymbol};
  const cuda::CudaModule* module = entry();
  if (module->abi_version != cuda::kCudaModuleAbi || module->size != sizeof(cuda::CudaModule))
    return {nullptr, "CUDA module " + path + " was built for another version of specula"};
  g_loaded = true;
  return {module, ""};
}

const LoadedModule& loaded() {
  static const LoadedModule once = load(cuda_module_path());
  return once;
}

// The module, or SpeculaError with `what` and why there is none.
const cuda::CudaModule& module_for(const std::string& what) {
  const LoadedModule& m = loaded();
  if (m.module == nullptr) throw SpeculaError(what + ": " + m.error);
  return *m.module;
}

}  // namespace

std::string cuda_module_path() {
  const char* chosen = std::getenv("SPECULA_CUDA_MODULE");
  if (chosen != nullptr && *chosen != '\0') return chosen;
#ifdef SPECULA_CUDA_MODULE_PATH
  return SPECULA_CUDA_MODULE_PATH;
#else
  return "";
#endif
}

bool cuda_module_loaded() { return g_loaded; }

int cuda_device_count() {
  const LoadedModule& m = loaded();
  return m.module != nullptr ? m.module->device_count() : 0;
}

std::string cuda_unavailable_reason() {
  const LoadedModule& m = loaded();
  return m.module != nullptr ? m.module->unavailable_reason() : m.error;
}

std::string cuda_device_name() {
  const LoadedModule& m = loaded();
  return m.module != nullptr ? m.module->device_name() : "";
}

double cuda_copy_bandwidth(std::size_t bytes, int reps) {
  return module_for("copy bandwidth: no GPU").copy_bandwidth(bytes, reps);
}

std::unique_ptr<Backend> cuda::make_cuda_backend(const Model& model, std::optional<MatrixFormat> matrices_as,
                                                 const CudaOptions& options) {
  const LoadedModule& m = loaded();
  if (m.module == nullptr) throw SpeculaError("backend 'cuda': " + m.error + "; use --backend cpu");
  return m.module->make_backend(model, matrices_as, options);
}

std::unique_ptr<HeadBackend> cuda::make_cuda_head_backend(const HeadModel& head, const Model& target) {
  const LoadedModule& m = loaded();
  if (m.module == nullptr) throw SpeculaError(head.dir() + ": backend 'cuda': " + m.error + "; use --backend cpu");
  return m.module->make_head_backend(head, target);
}

std::unique_ptr<MedusaBackend> cuda::make_cuda_medusa_backend(const MedusaModel& medusa, const Model& target) {
  const LoadedModule& m = loaded();
  if (m.module == nullptr) throw SpeculaError(medusa.dir() + ": backend 'cuda': " + m.error + "; use --backend cpu");
  return m.module->make_medusa_backend(medusa, target);
}

std::size_t cuda::cuda_live_graphs() {
  const LoadedModule& m = loaded();
  return m.module != nullptr ? m.module->live_graphs() : 0;
}

namespace cuda::harness {
namespace {
const CudaModule& harness_module() { return module_for("CUDA kernel harness"); }
}  // namespace

std::vector<float> embed(const TensorView& table, std::span<const int> tokens) {
  return harness_module().embed(table, tokens);
}
std::vector<float> rms_norm(std::span<const float> x, std::span<const float> weight, float eps, int n, int dim) {
  return harness_module().rms_norm(x, weight, eps, n, dim);
}
std::vector<float> silu_mul(std::span<const float> gate_up, int n, int ffn) {
  return harness_module().silu_mul(gate_up, n, ffn);
}
std::vector<float> matmul(std::span<const float> x, std::span<const std::uint16_t> w, std::span<const float> bias,
                          std::span<const float> y_in, int n, int in, int out, bool accumulate, MatmulPath path) {
  return harness_module().matmul(x, w, bias, y_in, n, in, out, accumulate, path);
}
std::vector<float> qk_rope_store(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, DType page_dtype,
                                 int layer, std::span<const float> qkv, std::span<const float> inv_freq,
                                 std::span<const float> q_norm, std::span<const float> k_norm, float eps,
                                 int num_heads) {
  return harness_module().qk_rope_store(batch, plan, pages, page_dtype, layer, qkv, inv_freq, q_norm, k_norm, eps,
                                        num_heads);
}
std::vector<float> attention(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, DType page_dtype,
                             int layer, int num_heads, int window, std::span<const float> q) {
  return harness_module().attention(batch, plan, pages, page_dtype, layer, num_heads, window, q);
}
void kv_copies(std::span<const KvCopy> copies, PageStorage& pages, DType page_dtype) {
  harness_module().kv_copies(copies, pages, page_dtype);
}
TreeVerdicts verify_tree(const TreeBatch& batch, bool greedy) { return harness_module().verify_tree(batch, greedy); }
SampledRows sample(const SamplingBatch& batch) { return harness_module().sample(batch); }
std::vector<int> draw_children(const ChildrenBatch& batch) { return harness_module().draw_children(batch); }
std::vector<float> edit_logits(const EditBatch& batch) { return harness_module().edit_logits(batch); }
DynamicGrowth grow_dynamic(const DynamicBatch& batch) { return harness_module().grow_dynamic(batch); }
std::vector<std::int32_t> tree_rows(const TreeRowsBatch& batch) { return harness_module().tree_rows(batch); }

}  // namespace cuda::harness
}  // namespace specula
