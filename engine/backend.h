// defines: Backend, the engine seam: one forward over a ragged batch of many sequences
// (engine/batch.h) against paged KV storage through a KvPlan, on a device; Workspace, the
// caller-owned scratch of one stream of forwards (so one loaded model serves many streams);
// BackendKind and make_backend, the name -> implementation choice (CPU today; CUDA behind the
// same contract). No CUDA or cpu:: type appears here.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "engine/batch.h"
#include "engine/device_draft.h"
#include "engine/device_verify.h"
#include "engine/matrix_format.h"
#include "model/model.h"
#include "kv/kv_plan.h"
#include "kv/page_storage.h"

namespace specula {

enum class BackendKind { kCpu, kCuda };

inline std::span<const EnumName<BackendKind>> enum_names(BackendKind) {
  static constexpr EnumName<BackendKind> kNames[] = {{BackendKind::kCpu, "cpu"}, {BackendKind::kCuda, "cuda"}};
  return kNames;
}

// The residual stream a forward copies out beside its logits (what draft heads read): for each
// batch row of `rows` and each l of `layers`, the input of decoder layer l (l =
// num_hidden_layers: the last layer's output, before the final norm). Empty: nothing is copied.
//   out: [rows.size(), layers.size(), hidden]
struct StateTaps {
  std::span<const int> layers;
  std::span<const int> rows;
  std::span<float> out;
  bool empty() const { return layers.empty() || rows.empty(); }
};

// Throws SpeculaError unless `taps` fits a forward of `batch` on a model of `config`: layers in
// [0, num_hidden_layers], rows of the batch, out of the size the layers and rows give.
void check_taps(const StateTaps& taps, const RaggedBatch& batch, const ModelConfig& config);

// Scratch of one stream of forwards; each backend defines what it holds.
class Workspace {
 public:
  virtual ~Workspace() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  const Model& model() const { return model_; }
  const ModelConfig& config() const { return model_.config(); }
  // Bytes of weights one decode step reads (every matrix once, in the dtype it is read in).
  virtual std::size_t weight_bytes() const = 0;
  virtual std::unique_ptr<Workspace> make_workspace() const = 0;
  // The layout of the KV caches this backend's forwards take: the model's host F32 pages on
  // the CPU; device pages (KvLayout::device_pages) in the backend's KV dtype on a GPU.
  virtual KvLayout kv_layout(int block_size) const { return model().kv_layout(block_size); }

  // Runs `batch`: writes row r's keys and values at plan.row_slots[r] of `pages` (the plan
  // of this batch from KvCache::prepare, pending copies already run), attends through the
  // plan's page lists under the batch's visibility, and writes the logits of
  // batch.logit_rows in order and the residual stream `taps` asks for (the logits are the
  // same with and without). A row's results never depend on the other rows (batch
  // invariance).
  //   logits: out [batch.num_logits(), vocab]
  virtual void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
                       std::span<float> logits, const StateTaps& taps) const = 0;

  // Whether forward_verify() runs here: the device samples and verifies without the logits
  // leaving it.
  virtual bool verifies_on_device() const { return false; }
  // forward(), then each sequence of `verify` sampled and verified on the device:
  // verdicts[i] gets verify[i]'s result, and its span's logit rows are not written to `logits`
  // (the others' are, at their usual places). Throws SpeculaError for a malformed `verify`,
  // for a context the CPU's sampler or verifier would refuse (a NaN or +inf logit, every logit
  // -inf, a target row without mass where a token is drawn), and where !verifies_on_device().
  // Returns the device's times of the two phases.
  //   verdicts: out [verify.size()]
  virtual DeviceTimes forward_verify(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
                              std::span<float> logits, const StateTaps& taps, std::span<const DeviceVerify> verify,
                              std::span<DeviceVerdict> verdicts) const;

  // Whether forward_draft() runs here: draft rounds whose tokens never leave the device.
  virtual bool drafts_on_device() const { return false; }
  // The rounds of `draft` (check_draft_rounds) back to back on the device, each a forward of
  // its batch into `pages` (pending copies run first), each of its logit rows then drawn under
  // its DrawOptions with its uniform (sampling/'s distribution and Residual::sample's
  // inverse-CDF rule), or its children drawn from that distribution (draw_siblings' rules), and
  // each token fed to the later rows that name its draw. Throws SpeculaError where the sampler
  // would refuse a row (a NaN or +inf logit, every logit -inf), and where !drafts_on_device().
  // Dynamic trees (DraftRounds::dynamic) grow there, and their nodes come back. Returns each
  // round's device time in seconds.
  //   tokens: out [draws] (kAbsentDraw: a child that is not there), or with dynamic trees
  //   [dynamic_nodes()] each sequence's nodes in order (kAbsentDraw: none); q: out [logit rows,
  //   vocab] each logit row's distribution when keep_q, else empty; parents: out
  //   [dynamic_nodes()] each node's parent among its sequence's (-1: the root) with dynamic
  //   trees, else empty
  virtual std::vector<double> forward_draft(const DraftRounds& draft, PageStorage& pages, Workspace& workspace,
                                            std::span<int> tokens, std::span<float> q, std::span<int> parents) const;
  // The same rounds enqueued and left on the device, nothing read back and no
  // synchronisation: a forward_verify of this device reads their draws (DeviceVerify::draws),
  // and refuses them, as forward_draft would, where a draw was refused. Of dynamic trees, their
  // nodes stay (DeviceDraws::tree_budget).
  virtual std::shared_ptr<const DeviceDraws> enqueue_draft(const DraftRounds& draft, PageStorage& pages,
                                                           Workspace& workspace) const;

 protected:
  explicit Backend(const Model& model) : model_(model) {}

 private:
  const Model& model_;
};

// `model` on backend `kind`, its matrices read as stored or as `matrices_as` (converted at
// load). Throws SpeculaError when the kind is not available in this build or on this machine.
std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, std::optional<MatrixFormat> matrices_as);

// Why this process's `kind` backend cannot read matrices as `matrices_as`, whatever the model;
// empty when it can. The CPU's bf16amx needs AMX tiles (engine/cpu/matmul_bf16amx.h); the
// CUDA backend's refusals depend on the model and are make_backend's (check_cuda_support).
std::string matrices_unsupported(BackendKind kind, std::optional<MatrixFormat> matrices_as);

}  // namespace specula
