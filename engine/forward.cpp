#include "engine/forward.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

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
  run(parts, logits, {}, {});
}

DeviceTimes ForwardContext::run(std::span<const SequenceRows> parts, std::span<float> logits,
                                std::span<const DeviceVerify> verify, std::span<DeviceVerdict> verdicts) const {
  const RaggedBatch batch = plan_batch(parts, cache.tables(), backend.config());  // validates before any change
  if (!verify.empty()) {
    SPECULA_CHECK(verdicts.size() == verify.size(), "forward: ", verdicts.size(), " verdicts for ", verify.size(),
                  " verified sequences");
    check_device_verify(batch, verify, backend.config().vocab_size);
  }
  const std::vector<int> counts = batch.rows_per_seq();
  const KvPlan plan = cache.prepare(batch.seqs, counts);
  DeviceTimes times;
  const auto forward = [&](const StateTaps& taps) {
    if (verify.empty())
      backend.forward(batch, plan, cache.storage(), workspace, logits, taps);
    else
      times = backend.forward_verify(batch, plan, cache.storage(), workspace, logits, taps, verify, verdicts);
  };
  if (cache.state_width() == 0) {
    forward({});
    return times;
  }
  // Every row's states, then each at its slot.
  const std::size_t width = static_cast<std::size_t>(cache.state_width());
  std::vector<int> rows(static_cast<std::size_t>(batch.num_rows()));
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> states(rows.size() * width);
  forward(StateTaps{cache.state_layers(), rows, states});
  for (std::size_t r = 0; r < rows.size(); ++r)
    std::copy_n(&states[r * width], width, cache.physical_states(plan.row_slots[r]).data());
  return times;
}

}  // namespace specula
