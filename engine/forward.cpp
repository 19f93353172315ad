#include "engine/forward.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "engine/chain_rounds.h"

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

std::vector<RoundTime> ForwardContext::run_chains(std::span<const DeviceChain> chains, std::span<int> tokens,
                                                  std::span<float> q, std::span<int> parents) const {
  const std::size_t vocab = static_cast<std::size_t>(backend.config().vocab_size);
  const std::size_t total = check_chains(chains);
  SPECULA_CHECK(tokens.size() == total, "device draft: tokens holds ", tokens.size(), " entries for ", total);
  SPECULA_CHECK(q.empty() || q.size() == total * vocab, "device draft: q holds ", q.size(), " floats; need 0 or ",
                total * vocab);
  const bool dynamic = !chains.empty() && chains.front().is_dynamic();
  SPECULA_CHECK(parents.size() == (dynamic ? total : 0), "device draft: parents holds ", parents.size(), " entries; need ",
                dynamic ? total : 0);
  SPECULA_CHECK(!dynamic || q.empty(), "device draft: dynamic trees give no q (their children are the top-k)");
  if (dynamic)
    return with_rollback(cache, chains, [&] {
      const ChainRounds plan = plan_dynamic_rounds(cache, backend.config(), chains);
      const std::vector<double> seconds = backend.forward_draft(plan.draft, cache.storage(), workspace, tokens, {}, parents);
      std::vector<RoundTime> times;
      for (std::size_t r = 0; r < seconds.size(); ++r) times.push_back(RoundTime{plan.round_rows[r], seconds[r]});
      return times;
    });
  return with_rollback(cache, chains, [&] {
    const ChainRounds plan = plan_chain_rounds(cache, backend.config(), chains, !q.empty());
    std::vector<int> drawn(static_cast<std::size_t>(plan.draft.draws()));
    std::vector<float> probs(plan.draft.keep_q ? static_cast<std::size_t>(plan.draft.logit_rows()) * vocab : 0);
    const std::vector<double> seconds = backend.forward_draft(plan.draft, cache.storage(), workspace, drawn, probs, {});
    std::vector<RoundTime> times;
    for (std::size_t r = 0; r < seconds.size(); ++r) times.push_back(RoundTime{plan.round_rows[r], seconds[r]});
    const std::vector<int> draw_rows = plan.draft.draw_rows();
    std::size_t out = 0;
    for (const std::vector<int>& draws : plan.draw_of)
      for (const int d : draws) {
        tokens[out] = drawn[static_cast<std::size_t>(d)];
        if (plan.draft.keep_q) {
          const std::size_t row = static_cast<std::size_t>(draw_rows[static_cast<std::size_t>(d)]);
          std::copy_n(probs.begin() + static_cast<std::ptrdiff_t>(row * vocab), vocab,
                      q.begin() + static_cast<std::ptrdiff_t>(out * vocab));
        }
        ++out;
      }
    return times;
  });
}

EnqueuedChains ForwardContext::enqueue_chains(std::span<const DeviceChain> chains) const {
  check_chains(chains);
  const bool dynamic = !chains.empty() && chains.front().is_dynamic();
  const bool sampled = std::any_of(chains.begin(), chains.end(), [](const DeviceChain& c) { return c.sampled(); });
  return with_rollback(cache, chains, [&] {
    ChainRounds plan = dynamic ? plan_dynamic_rounds(cache, backend.config(), chains) : plan_chain_rounds(cache, backend.config(), chains, sampled);
    EnqueuedChains out;
    out.draws = backend.enqueue_draft(plan.draft, cache.storage(), workspace);
    out.draw_of = std::move(plan.draw_of);
    out.round_rows = std::move(plan.round_rows);
    return out;
  });
}

}  // namespace specula
