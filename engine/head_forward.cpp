#include "engine/head_forward.h"

#include <algorithm>

#include "engine/chain_rounds.h"

namespace specula {

void HeadForwardContext::run(std::span<const SequenceRows> parts, std::span<const float> x, std::span<float> logits,
                             std::span<float> out) const {
  const RaggedBatch batch = plan_batch(parts, cache.tables(), target);  // validates before any change
  const std::vector<int> counts = batch.rows_per_seq();
  const KvPlan plan = cache.prepare(batch.seqs, counts);
  head.forward(batch, plan, cache.storage(), workspace, x, logits, out);
}

EnqueuedChains HeadForwardContext::enqueue_chains(std::span<const DeviceChain> chains,
                                                  std::span<const float> taps) const {
  check_chains(chains);
  const std::size_t width = static_cast<std::size_t>(head.config().num_taps() * head.config().target_hidden_size);
  std::size_t first_rows = 0;
  for (const DeviceChain& c : chains) first_rows += c.first.tokens.size();
  SPECULA_CHECK(taps.size() == first_rows * width, "head device draft: taps hold ", taps.size(), " floats; the ",
                first_rows, " first rows need ", first_rows * width);
  const bool dynamic = !chains.empty() && chains.front().is_dynamic();
  const bool sampled = std::any_of(chains.begin(), chains.end(), [](const DeviceChain& c) { return c.sampled(); });
  return with_rollback(cache, chains, [&] {
    ChainRounds plan =
        dynamic ? plan_dynamic_rounds(cache, target, chains) : plan_chain_rounds(cache, target, chains, sampled);
    EnqueuedChains out;
    out.draws = head.enqueue_draft(plan.draft, plan.state_feeds, taps, cache.storage(), workspace);
    out.draw_of = std::move(plan.draw_of);
    out.round_rows = std::move(plan.round_rows);
    return out;
  });
}

}  // namespace specula
