#include "engine/forward.h"

namespace specula {

int logit_rows(std::span<const SequenceRows> parts) {
  int rows = 0;
  for (const SequenceRows& p : parts)
    rows += p.logits == RowLogits::kAll ? static_cast<int>(p.tokens.size()) : p.logits == RowLogits::kLast ? 1 : 0;
  return rows;
}

int batch_rows(std::span<const SequenceRows> parts) {
  int rows = 0;
  for (const SequenceRows& p : parts) rows += static_cast<int>(p.tokens.size());
  return rows;
}

void ForwardContext::run(std::span<const SequenceRows> parts, std::span<float> logits) const {
  const RaggedBatch batch = plan_batch(parts, cache.tables(), backend.config());  // validates before any change
  const std::vector<int> counts = batch.rows_per_seq();
  const KvPlan plan = cache.prepare(batch.seqs, counts);
  backend.forward(batch, plan, cache.storage(), workspace, logits);
}

}  // namespace specula
