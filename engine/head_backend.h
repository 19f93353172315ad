// defines: HeadBackend, the engine seam of an EAGLE draft head (model/head_model.h): the
// feature a head reads from the tapped target hidden states, then the head's one decoder layer
// over a ragged batch against its own paged KV cache (the contract of Backend::forward,
// engine/backend.h), giving draft-vocabulary logits and the next step's feature; and
// make_head_backend, the name -> implementation choice. No CUDA or cpu:: type appears here.
#pragma once

#include <memory>
#include <span>

#include "engine/backend.h"
#include "engine/batch.h"
#include "engine/device_draft.h"
#include "kv/kv_plan.h"
#include "kv/page_storage.h"
#include "model/head_model.h"
#include "model/model.h"

namespace specula {

class HeadBackend {
 public:
  virtual ~HeadBackend() = default;

  virtual BackendKind kind() const = 0;
  const HeadModel& head() const { return head_; }
  const HeadConfig& config() const { return head_.config(); }
  virtual std::unique_ptr<Workspace> make_workspace() const = 0;
  // The layout of the head's KV cache: one layer of the head's KV heads and head_dim, f32 (in
  // device memory on the CUDA backend).
  virtual KvLayout kv_layout(int block_size) const { return head_.kv_layout(block_size); }

  // x, the first draft step's feature, for n rows (batch invariant: a row's result depends on
  // that row alone): EAGLE-3 fc(taps); EAGLE-1 the target's final norm of its one tap.
  //   taps: in [n, num_taps * target_hidden_size] (the tapped states of a row side by side,
  //         in tap_layers order); x: out [n, hidden_size]
  virtual void project(std::span<const float> taps, std::span<float> x, int n, Workspace& workspace) const = 0;

  // One forward of the head's decoder layer over `batch`, whose tokens are target ids (the
  // plan, the pages of kv_layout() and the visibility rule as Backend::forward's). Row r's
  // input is x[r] (project's output, or an earlier draft step's `out` row) and
  // batch.tokens[r], embedded with the head's embedding or, when it has none, the target's.
  // A row's results never depend on the other rows (batch invariance).
  //   x:      in  [batch.num_rows(), hidden_size]
  //   logits: out [batch.num_logits(), draft_vocab_size] (rows of batch.logit_rows, in order;
  //           draft id d is target id head().draft_to_target()[d])
  //   out:    out [batch.num_rows(), hidden_size] every row's layer output (EAGLE-3: before
  //           the final norm), the next draft step's x; it may be x itself
  virtual void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
                       std::span<const float> x, std::span<float> logits, std::span<float> out) const = 0;

  // Whether enqueue_draft draws on a device (the CUDA backend's; the CPU backend refuses it).
  virtual bool drafts_on_device() const { return false; }
  // Rounds of this head's forwards with their draws, enqueued on its device back to back and
  // left there (Backend::enqueue_draft's contract, engine/device_draft.h): nothing comes back
  // and nothing waits. Round 0's rows take project(taps) as their input states; a later round's
  // row i the output state of row state_feeds[i] (rows numbered across rounds; of dynamic
  // trees, the device rewrites those of nodes under another node: ChainRounds::state_feeds). A logit row's draft-vocabulary logits are laid into a row of the target's
  // vocabulary (each at its target id, -inf elsewhere) before its options' chain draws from
  // it, so that draws are target ids, fed as tokens, and q rows are the target's.
  //   taps: in [round 0 rows, num_taps * target_hidden_size]; state_feeds: in [rows of every round]
  virtual std::shared_ptr<const DeviceDraws> enqueue_draft(const DraftRounds& draft, std::span<const int> state_feeds,
                                                           std::span<const float> taps, PageStorage& pages,
                                                           Workspace& workspace) const;

 protected:
  explicit HeadBackend(const HeadModel& head) : head_(head) {}

 private:
  const HeadModel& head_;
};

// `head` on backend `kind`, embedding tokens with the head's own embedding or `target`'s
// (which must be the model the head was loaded against: its hidden size, vocabulary and layer
// count are checked); an EAGLE-1 head reads `target`'s final norm and lm_head. Both must
// outlive the backend. The CPU reads the matrices as stored; the CUDA backend
// (engine/cuda/head_cuda.h) holds them in bf16 and the KV pages in device memory, as the CUDA
// model backend does.
std::unique_ptr<HeadBackend> make_head_backend(BackendKind kind, const HeadModel& head, const Model& target);

}  // namespace specula
