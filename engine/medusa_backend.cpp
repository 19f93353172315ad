#include "engine/medusa_backend.h"

#include "base/error.h"
#include "engine/cpu/medusa_cpu.h"
#include "engine/cuda/head_cuda.h"

namespace specula {

std::unique_ptr<MedusaBackend> make_medusa_backend(BackendKind kind, const MedusaModel& medusa, const Model& target) {
  const MedusaConfig& m = medusa.config();
  const ModelConfig& t = target.config();
  SPECULA_CHECK(t.hidden_size == m.hidden_size && t.vocab_size == m.vocab_size, medusa.dir(),
                ": the Medusa heads were loaded for a target of hidden_size ", m.hidden_size, " and vocab_size ",
                m.vocab_size, ", not ", target.dir(), " (hidden_size ", t.hidden_size, ", vocab_size ", t.vocab_size, ")");
  if (kind == BackendKind::kCuda) return cuda::make_cuda_medusa_backend(medusa, target);
  return std::make_unique<cpu::MedusaCpuBackend>(medusa, target.final_norm(), t.rms_norm_eps);
}

}  // namespace specula
