#include "engine/head_forward.h"

namespace specula {

void HeadForwardContext::run(std::span<const SequenceRows> parts, std::span<const float> x, std::span<float> logits,
                             std::span<float> out) const {
  const RaggedBatch batch = plan_batch(parts, cache.tables(), target);  // validates before any change
  const std::vector<int> counts = batch.rows_per_seq();
  const KvPlan plan = cache.prepare(batch.seqs, counts);
  head.forward(batch, plan, cache.storage(), workspace, x, logits, out);
}

}  // namespace specula
