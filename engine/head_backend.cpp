#include "engine/head_backend.h"

#include "base/error.h"
#include "engine/cpu/head_cpu.h"
#include "engine/cuda/head_cuda.h"

namespace specula {

std::shared_ptr<const DeviceDraws> HeadBackend::enqueue_draft(const DraftRounds&, std::span<const int>,
                                                              std::span<const float>, PageStorage&, Workspace&) const {
  throw SpeculaError(head_.dir() + ": backend '" + name_of(kind()) +
                     "' runs the head's draft forwards one at a time; only 'cuda' draws them on its device");
}

std::unique_ptr<HeadBackend> make_head_backend(BackendKind kind, const HeadModel& head, const Model& target) {
  const HeadConfig& h = head.config();
  const ModelConfig& t = target.config();
  SPECULA_CHECK(t.hidden_size == h.target_hidden_size && t.vocab_size == h.layer.vocab_size &&
                    t.num_hidden_layers == h.target_layers,
                head.dir(), ": the head was loaded for a target of hidden_size ", h.target_hidden_size, ", vocab_size ",
                h.layer.vocab_size, " and ", h.target_layers, " layers, not ", target.dir(), " (hidden_size ",
                t.hidden_size, ", vocab_size ", t.vocab_size, ", ", t.num_hidden_layers, " layers)");
  if (kind == BackendKind::kCuda) return cuda::make_cuda_head_backend(head, target);
  return std::make_unique<cpu::HeadCpuBackend>(head, target);
}

}  // namespace specula
