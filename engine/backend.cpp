#include "engine/backend.h"

#include "base/error.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/matmul_bf16amx.h"
#include "engine/cuda/cuda_backend.h"

namespace specula {

void check_taps(const StateTaps& taps, const RaggedBatch& batch, const ModelConfig& config) {
  for (const int l : taps.layers)
    SPECULA_CHECK(l >= 0 && l <= config.num_hidden_layers, "forward: tap layer ", l, " is outside [0, ",
                  config.num_hidden_layers, "]");
  for (const int r : taps.rows)
    SPECULA_CHECK(r >= 0 && r < batch.num_rows(), "forward: tap row ", r, " is outside the batch's ", batch.num_rows(),
                  " rows");
  const std::size_t need = taps.rows.size() * taps.layers.size() * static_cast<std::size_t>(config.hidden_size);
  SPECULA_CHECK(taps.out.size() == need, "forward: the taps buffer holds ", taps.out.size(), " floats, need ", need);
}

DeviceTimes Backend::forward_verify(const RaggedBatch&, const KvPlan&, PageStorage&, Workspace&, std::span<float>,
                                    const StateTaps&, std::span<const DeviceVerify>, std::span<DeviceVerdict>) const {
  throw SpeculaError(detail::concat("backend '", name_of(kind()),
                                    "': verification on the device is not implemented here (verifies_on_device() is false)"));
}

namespace {

SpeculaError no_device_draft(BackendKind kind) {
  return SpeculaError(detail::concat("backend '", name_of(kind),
                                     "': drafting on the device is not implemented here (drafts_on_device() is false)"));
}

}  // namespace

std::vector<double> Backend::forward_draft(const DraftRounds&, PageStorage&, Workspace&, std::span<int>,
                                           std::span<float>, std::span<int>) const {
  throw no_device_draft(kind());
}

std::shared_ptr<const DeviceDraws> Backend::enqueue_draft(const DraftRounds&, PageStorage&, Workspace&) const {
  throw no_device_draft(kind());
}

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
