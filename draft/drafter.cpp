#include "draft/drafter.h"

namespace specula {

Proposal propose(Drafter& drafter, std::span<const int> committed, DraftBound bound, Philox& rng) {
  drafter.start(committed, bound, rng);
  std::vector<float> logits;
  while (const SequenceRows* rows = drafter.pending_forward()) {
    const ForwardContext& context = *drafter.forward_context();
    logits.resize(static_cast<std::size_t>(logit_rows(std::span(rows, 1))) * context.backend.config().vocab_size);
    context.run(*rows, logits);
    drafter.forward_done(logits);
  }
  return drafter.take_proposal();
}

}  // namespace specula
