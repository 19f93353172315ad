#include "engine/device_draft.h"

#include <cmath>

#include "base/error.h"

namespace specula {

int DraftRounds::rows() const {
  int n = 0;
  for (const RaggedBatch& b : batches) n += b.num_rows();
  return n;
}

int DraftRounds::draws() const {
  int n = 0;
  for (const RaggedBatch& b : batches) n += b.num_logits();
  return n;
}

void check_draft_rounds(const DraftRounds& draft, int vocab) {
  SPECULA_CHECK(vocab > 0, "device draft: vocabulary of ", vocab, " tokens");
  SPECULA_CHECK(draft.plans.size() == draft.batches.size(), "device draft: ", draft.plans.size(), " plans for ",
                draft.batches.size(), " rounds");
  SPECULA_CHECK(static_cast<int>(draft.feeds.size()) == draft.rows(), "device draft: ", draft.feeds.size(),
                " feeds for ", draft.rows(), " rows");
  const int draws = draft.draws();
  SPECULA_CHECK(static_cast<int>(draft.options.size()) == draws && static_cast<int>(draft.uniforms.size()) == draws,
                "device draft: ", draft.options.size(), " options and ", draft.uniforms.size(), " uniforms for ", draws,
                " draws");
  int row = 0, drawn_before = 0;
  for (int r = 0; r < draft.rounds(); ++r) {
    const RaggedBatch& batch = draft.batches[static_cast<std::size_t>(r)];
    SPECULA_CHECK(static_cast<int>(draft.plans[static_cast<std::size_t>(r)].row_slots.size()) == batch.num_rows(),
                  "device draft: round ", r, "'s plan has ", draft.plans[static_cast<std::size_t>(r)].row_slots.size(),
                  " slots for ", batch.num_rows(), " rows");
    for (int i = 0; i < batch.num_rows(); ++i, ++row) {
      const int feed = draft.feeds[static_cast<std::size_t>(row)];
      SPECULA_CHECK(feed >= -1 && feed < drawn_before, "device draft: round ", r, " row ", i, " is fed draw ", feed,
                    "; an earlier round's draws are [0, ", drawn_before, ")");
    }
    drawn_before += batch.num_logits();
  }
  for (int d = 0; d < draws; ++d) {
    const DrawOptions& o = draft.options[static_cast<std::size_t>(d)];
    const double u = draft.uniforms[static_cast<std::size_t>(d)];
    SPECULA_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "device draft: draw ", d, ": temperature ",
                  o.temperature, " is not finite and >= 0");
    SPECULA_CHECK(o.top_k >= 0, "device draft: draw ", d, ": top_k ", o.top_k, " is negative");
    SPECULA_CHECK(o.top_p > 0 && o.top_p <= 1, "device draft: draw ", d, ": top_p ", o.top_p, " is outside (0, 1]");
    SPECULA_CHECK(o.min_p >= 0 && o.min_p <= 1, "device draft: draw ", d, ": min_p ", o.min_p, " is outside [0, 1]");
    SPECULA_CHECK(u >= 0 && u < 1, "device draft: draw ", d, ": uniform ", u, " is outside [0, 1)");
  }
}

}  // namespace specula
