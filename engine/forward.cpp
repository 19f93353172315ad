#include "engine/forward.h"

#include <algorithm>
#include <numeric>

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
  if (cache.state_width() == 0) {
    backend.forward(batch, plan, cache.storage(), workspace, logits, {});
    return;
  }
  // Every row's states, then each at its slot.
  const std::size_t width = static_cast<std::size_t>(cache.state_width());
  std::vector<int> rows(static_cast<std::size_t>(batch.num_rows()));
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> states(rows.size() * width);
  backend.forward(batch, plan, cache.storage(), workspace, logits, StateTaps{cache.state_layers(), rows, states});
  for (std::size_t r = 0; r < rows.size(); ++r)
    std::copy_n(&states[r * width], width, cache.physical_states(plan.row_slots[r]).data());
}

}  // namespace specula
