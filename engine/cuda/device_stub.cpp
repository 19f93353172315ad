// The CPU-only build: no CUDA compiler was found at configure time (or SPECULA_ENABLE_CUDA is
// off), so there is no device and the CUDA backend refuses.
#include "base/error.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_harness.h"

namespace specula {

int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "built without CUDA (SPECULA_ENABLE_CUDA off, or nvcc not found at configure time)"; }
std::string cuda_device_name() { return ""; }
double cuda_copy_bandwidth(std::size_t, int) {
  throw SpeculaError("copy bandwidth: no GPU (" + cuda_unavailable_reason() + ")");
}

std::unique_ptr<Backend> cuda::make_cuda_backend(const Model&, std::optional<DType>, const CudaOptions&) {
  throw SpeculaError("backend 'cuda': this build has no CUDA (" + cuda_unavailable_reason() + "); use --backend cpu");
}

}  // namespace specula

// The kernels' test harness has nothing to run (tests skip before calling it).
namespace specula::cuda::harness {
namespace {
[[noreturn]] void no_cuda() { throw SpeculaError("CUDA kernel harness: " + cuda_unavailable_reason()); }
}  // namespace

std::vector<float> embed(const TensorView&, std::span<const int>) { no_cuda(); }
std::vector<float> rms_norm(std::span<const float>, std::span<const float>, float, int, int) { no_cuda(); }
std::vector<float> silu_mul(std::span<const float>, int, int) { no_cuda(); }
std::vector<float> matmul(std::span<const float>, std::span<const std::uint16_t>, std::span<const float>,
                          std::span<const float>, int, int, int, bool, MatmulPath) {
  no_cuda();
}
std::vector<float> qk_rope_store(const RaggedBatch&, const KvPlan&, PageStorage&, DType, int, std::span<const float>,
                                 std::span<const float>, std::span<const float>, std::span<const float>, float, int) {
  no_cuda();
}
std::vector<float> attention(const RaggedBatch&, const KvPlan&, const PageStorage&, DType, int, int, int,
                             std::span<const float>) {
  no_cuda();
}
void kv_copies(std::span<const KvCopy>, PageStorage&, DType) { no_cuda(); }

}  // namespace specula::cuda::harness
