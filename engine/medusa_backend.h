// defines: MedusaBackend, the engine seam of Medusa heads (model/medusa_model.h): the target's
// final norm over the target's last pre-norm hidden states, then every head's ResBlocks and
// its lm_head, giving each row's K logit rows; and make_medusa_backend, the name ->
// implementation choice. No CUDA or cpu:: type appears here.
#pragma once

#include <memory>
#include <span>

#include "engine/backend.h"
#include "model/medusa_model.h"
#include "model/model.h"

namespace specula {

class MedusaBackend {
 public:
  virtual ~MedusaBackend() = default;

  virtual BackendKind kind() const = 0;
  const MedusaModel& medusa() const { return medusa_; }
  const MedusaConfig& config() const { return medusa_.config(); }
  virtual std::unique_ptr<Workspace> make_workspace() const = 0;

  // The first `heads` heads (1..num_heads) over n rows (batch invariant: a row's results
  // depend on that row alone; a head's do not depend on how many run).
  //   states: in  [n, hidden] the target's last hidden states BEFORE its final norm (the
  //           state at tap layer num_hidden_layers), which this applies
  //   logits: out [n, heads, vocab] head i's logits of row r at [r, i]
  virtual void forward(std::span<const float> states, int n, int heads, Workspace& workspace,
                       std::span<float> logits) const = 0;

 protected:
  explicit MedusaBackend(const MedusaModel& medusa) : medusa_(medusa) {}

 private:
  const MedusaModel& medusa_;
};

// `medusa` on backend `kind`, applying `target`'s final norm (the model it was loaded against:
// its hidden and vocabulary sizes are checked). Both must outlive the backend. On the CUDA
// backend (engine/cuda/head_cuda.h) the matrices are bf16, as the CUDA model backend's.
std::unique_ptr<MedusaBackend> make_medusa_backend(BackendKind kind, const MedusaModel& medusa, const Model& target);

}  // namespace specula
