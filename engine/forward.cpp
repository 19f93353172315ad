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

namespace {

// Every round of `chains` planned on `context`'s cache (their slots appended) as one
// DraftRounds; draw_of[i] lists chain i's draws.
struct ChainRounds {
  DraftRounds draft;
  std::vector<std::vector<int>> draw_of;
  std::vector<int> round_rows;
};

// Throws SpeculaError naming the chain unless each is well formed; returns their tokens in all.
std::size_t check_chains(std::span<const DeviceChain> chains) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < chains.size(); ++i) {
    const DeviceChain& c = chains[i];
    SPECULA_CHECK(c.length >= 1, "device draft: chain ", i, " has length ", c.length, "; need >= 1");
    SPECULA_CHECK(!c.first.tokens.empty() && c.first.parents.empty() && c.first.logits == RowLogits::kLast,
                  "device draft: chain ", i, "'s first rows must be a causal run with the last row's logits");
    SPECULA_CHECK(c.options.greedy() ? c.uniforms.empty() : static_cast<int>(c.uniforms.size()) == c.length,
                  "device draft: chain ", i, " has ", c.uniforms.size(), " uniforms; need ",
                  c.options.greedy() ? 0 : c.length);
    total += static_cast<std::size_t>(c.length);
  }
  return total;
}

ChainRounds plan_chain_rounds(const ForwardContext& context, std::span<const DeviceChain> chains, bool keep_q) {
  int rounds = 0;
  for (const DeviceChain& c : chains) rounds = std::max(rounds, c.length);
  // Round r > 0 feeds chain i the token of its draw in round r - 1, at the root's position + r,
  // under the nodes before it (parents -1, 0, .., r - 1).
  std::vector<int> parents(static_cast<std::size_t>(rounds));
  std::iota(parents.begin(), parents.end(), -1);
  std::vector<std::vector<int>> positions(chains.size());
  for (std::size_t i = 0; i < chains.size(); ++i) {
    const int root = chains[i].first.positions.back();
    for (int r = 1; r < chains[i].length; ++r) positions[i].push_back(root + r);
  }
  const int placeholder = 0;
  ChainRounds out;
  out.draft.keep_q = keep_q;
  out.draw_of.resize(chains.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<SequenceRows> parts;
    for (std::size_t i = 0; i < chains.size(); ++i) {
      const DeviceChain& c = chains[i];
      if (c.length <= r) continue;
      if (r == 0) {
        parts.push_back(c.first);
        out.draft.feeds.insert(out.draft.feeds.end(), c.first.tokens.size(), -1);
      } else {
        parts.push_back(SequenceRows{c.first.seq, std::span(&placeholder, 1),
                                     std::span(positions[i]).subspan(static_cast<std::size_t>(r - 1), 1),
                                     std::span(parents).first(static_cast<std::size_t>(r)), RowLogits::kAll});
        out.draft.feeds.push_back(out.draw_of[i].back());
      }
      out.draw_of[i].push_back(static_cast<int>(out.draft.options.size()));
      out.draft.options.push_back(c.options);
      out.draft.uniforms.push_back(c.options.greedy() ? 0.0 : c.uniforms[static_cast<std::size_t>(r)]);
    }
    RaggedBatch batch = plan_batch(parts, context.cache.tables(), context.backend.config());
    const std::vector<int> counts = batch.rows_per_seq();
    out.draft.plans.push_back(context.cache.prepare(batch.seqs, counts));
    out.round_rows.push_back(batch.num_rows());
    out.draft.batches.push_back(std::move(batch));
  }
  return out;
}

// run(), and where it throws, every chain's sequence truncated back to its length before.
template <class Run>
auto with_rollback(KvCache& cache, std::span<const DeviceChain> chains, Run run) {
  SPECULA_CHECK(cache.state_width() == 0, "device draft: the draft cache keeps states, which forward_draft does not write");
  std::vector<int> lengths;
  for (const DeviceChain& c : chains) lengths.push_back(cache.length(c.first.seq));
  try {
    return run();
  } catch (...) {
    for (std::size_t i = 0; i < chains.size(); ++i) cache.truncate(chains[i].first.seq, lengths[i]);
    throw;
  }
}

}  // namespace

std::vector<RoundTime> ForwardContext::run_chains(std::span<const DeviceChain> chains, std::span<int> tokens,
                                                  std::span<float> q) const {
  const std::size_t vocab = static_cast<std::size_t>(backend.config().vocab_size);
  const std::size_t total = check_chains(chains);
  SPECULA_CHECK(tokens.size() == total, "device draft: tokens holds ", tokens.size(), " entries for ", total);
  SPECULA_CHECK(q.empty() || q.size() == total * vocab, "device draft: q holds ", q.size(), " floats; need 0 or ",
                total * vocab);
  return with_rollback(cache, chains, [&] {
    const ChainRounds plan = plan_chain_rounds(*this, chains, !q.empty());
    std::vector<int> drawn(plan.draft.options.size());
    std::vector<float> probs(plan.draft.keep_q ? drawn.size() * vocab : 0);
    const std::vector<double> seconds = backend.forward_draft(plan.draft, cache.storage(), workspace, drawn, probs);
    std::vector<RoundTime> times;
    for (std::size_t r = 0; r < seconds.size(); ++r) times.push_back(RoundTime{plan.round_rows[r], seconds[r]});
    std::size_t out = 0;
    for (const std::vector<int>& draws : plan.draw_of)
      for (const int d : draws) {
        tokens[out] = drawn[static_cast<std::size_t>(d)];
        if (plan.draft.keep_q)
          std::copy_n(probs.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(d) * vocab), vocab,
                      q.begin() + static_cast<std::ptrdiff_t>(out * vocab));
        ++out;
      }
    return times;
  });
}

EnqueuedChains ForwardContext::enqueue_chains(std::span<const DeviceChain> chains) const {
  check_chains(chains);
  const bool sampled = std::any_of(chains.begin(), chains.end(), [](const DeviceChain& c) { return !c.options.greedy(); });
  return with_rollback(cache, chains, [&] {
    ChainRounds plan = plan_chain_rounds(*this, chains, sampled);
    EnqueuedChains out;
    out.draws = backend.enqueue_draft(plan.draft, cache.storage(), workspace);
    out.draw_of = std::move(plan.draw_of);
    out.round_rows = std::move(plan.round_rows);
    return out;
  });
}

}  // namespace specula
