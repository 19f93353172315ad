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
// DraftRounds; draw_of[i] lists chain i's draws, node by node (of dynamic trees, the nodes:
// tree i's node j is i * length + j).
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
    SPECULA_CHECK(c.sampled() ? static_cast<int>(c.uniforms.size()) == c.length : c.uniforms.empty(),
                  "device draft: chain ", i, " has ", c.uniforms.size(), " uniforms; need ", c.sampled() ? c.length : 0);
    if (c.is_dynamic() || chains.front().is_dynamic()) {
      const DeviceChain& f = chains.front();
      SPECULA_CHECK(c.length == f.length && c.dynamic_width == f.dynamic_width && c.dynamic_top_k == f.dynamic_top_k,
                    "device draft: chain ", i, " is not a dynamic tree of chain 0's budget ", f.length, ", width ",
                    f.dynamic_width, " and top_k ", f.dynamic_top_k, " (one call grows one shape)");
      SPECULA_CHECK(c.dynamic_top_k >= 1 && !c.is_tree(), "device draft: dynamic tree ", i, " has top_k ",
                    c.dynamic_top_k, " and ", c.tree_parents.size(), " static parents; need top_k >= 1 and none");
    }
    if (c.is_tree()) {
      SPECULA_CHECK(static_cast<int>(c.tree_parents.size()) == c.length, "device draft: tree ", i, " has ",
                    c.tree_parents.size(), " parents for ", c.length, " nodes");
      SPECULA_CHECK(is_draw_mode(c.tree_mode), "device draft: tree ", i, " has mode ", c.tree_mode,
                    "; the modes are 0, 1 and 2 (kDraw*)");
      // Growth order: parents before their nodes and in order, so each level follows the one
      // above and each context's children are contiguous.
      for (int n = 0; n < c.length; ++n) {
        const int parent = c.tree_parents[static_cast<std::size_t>(n)];
        const int before = n == 0 ? -1 : c.tree_parents[static_cast<std::size_t>(n - 1)];
        SPECULA_CHECK(parent >= -1 && parent < n && parent >= before, "device draft: tree ", i, " node ", n,
                      " has parent ", parent, "; nodes must follow their parents, in their parents' order");
      }
    }
    total += static_cast<std::size_t>(c.length);
  }
  return total;
}

// One more round of `parts`: its batch planned on `context`'s cache and its slots appended.
void add_round(const ForwardContext& context, std::span<const SequenceRows> parts, ChainRounds& out) {
  RaggedBatch batch = plan_batch(parts, context.cache.tables(), context.backend.config());
  const std::vector<int> counts = batch.rows_per_seq();
  out.draft.plans.push_back(context.cache.prepare(batch.seqs, counts));
  out.round_rows.push_back(batch.num_rows());
  out.draft.batches.push_back(std::move(batch));
}

// A chain as a tree: each node's parent and depth, each context's children (0 the root, 1 + n
// after node n) and each node's position.
struct ChainShape {
  std::vector<int> parents, depth, positions;  // [nodes]
  std::vector<std::vector<int>> children;      // [nodes + 1]
  int depth_max = 0;
};

ChainShape shape_of(const DeviceChain& c) {
  ChainShape shape;
  const std::size_t n = static_cast<std::size_t>(c.length);
  if (c.is_tree()) {
    shape.parents.assign(c.tree_parents.begin(), c.tree_parents.end());
  } else {
    shape.parents.resize(n);
    std::iota(shape.parents.begin(), shape.parents.end(), -1);
  }
  shape.children.resize(n + 1);
  const int root = c.first.positions.back();
  for (std::size_t i = 0; i < n; ++i) {
    const int parent = shape.parents[i];
    shape.depth.push_back(parent < 0 ? 1 : shape.depth[static_cast<std::size_t>(parent)] + 1);
    shape.positions.push_back(root + shape.depth.back());
    shape.children[static_cast<std::size_t>(parent + 1)].push_back(static_cast<int>(i));
    shape.depth_max = std::max(shape.depth_max, shape.depth.back());
  }
  return shape;
}

// Round 0 is every chain's first rows; round r > 0 feeds a chain's nodes of depth r (a
// contiguous run) when it is deeper than r, each its draw's token at its position under its
// ancestors. A logit row's draws are its context's children, in node order. Where any chain is
// a tree, every logit row draws through children (a chain's: one, kDrawTopK of the one-hot
// greedy distribution or kDrawSampled).
ChainRounds plan_chain_rounds(const ForwardContext& context, std::span<const DeviceChain> chains, bool keep_q) {
  std::vector<ChainShape> shapes;
  int rounds = 0;
  std::size_t widest = 0;
  for (const DeviceChain& c : chains) {
    shapes.push_back(shape_of(c));
    rounds = std::max(rounds, shapes.back().depth_max);
    widest = std::max(widest, static_cast<std::size_t>(c.length));
  }
  const bool children = std::any_of(chains.begin(), chains.end(), [](const DeviceChain& c) { return c.is_tree(); });
  const std::vector<int> placeholders(widest, 0);
  ChainRounds out;
  out.draft.keep_q = keep_q;
  out.draw_of.resize(chains.size());
  for (std::size_t i = 0; i < chains.size(); ++i) out.draw_of[i].resize(static_cast<std::size_t>(chains[i].length));
  int drawn = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<SequenceRows> parts;
    for (std::size_t i = 0; i < chains.size(); ++i) {
      const DeviceChain& c = chains[i];
      const ChainShape& shape = shapes[i];
      if (shape.depth_max <= r) continue;
      std::vector<int> contexts;  // 0 the root, 1 + n after node n
      if (r == 0) {
        parts.push_back(c.first);
        out.draft.feeds.insert(out.draft.feeds.end(), c.first.tokens.size(), -1);
        contexts.push_back(0);
      } else {
        const auto level = std::equal_range(shape.depth.begin(), shape.depth.end(), r);
        const std::size_t lo = static_cast<std::size_t>(level.first - shape.depth.begin());
        const std::size_t hi = static_cast<std::size_t>(level.second - shape.depth.begin());
        parts.push_back(SequenceRows{c.first.seq, std::span(placeholders).first(hi - lo),
                                     std::span(shape.positions).subspan(lo, hi - lo), std::span(shape.parents).first(hi),
                                     RowLogits::kAll});
        for (std::size_t n = lo; n < hi; ++n) {
          out.draft.feeds.push_back(out.draw_of[i][n]);
          contexts.push_back(static_cast<int>(n) + 1);
        }
      }
      for (const int context : contexts) {
        const std::vector<int>& kids = shape.children[static_cast<std::size_t>(context)];
        out.draft.options.push_back(c.options);
        if (children) {
          out.draft.children.push_back(static_cast<int>(kids.size()));
          out.draft.child_modes.push_back(c.is_tree() ? c.tree_mode : c.options.greedy() ? kDrawTopK : kDrawSampled);
        }
        for (const int kid : kids) {
          out.draw_of[i][static_cast<std::size_t>(kid)] = drawn++;
          out.draft.uniforms.push_back(c.sampled() ? c.uniforms[static_cast<std::size_t>(kid)] : 0.0);
        }
      }
    }
    add_round(context, parts, out);
  }
  return out;
}

// Dynamic trees (check_chains: one shape): round 0 is every tree's first rows, round r > 0
// `width` placeholder rows a tree (token 0 at the root's position + 1, node (r - 1) * width +
// k under every earlier node, so that its mask has room for any ancestry) that the device
// rewrites from the nodes it took; every logit row draws top_k children by kDrawTopK.
ChainRounds plan_dynamic_rounds(const ForwardContext& context, std::span<const DeviceChain> chains) {
  const DeviceChain& shape = chains.front();
  const int width = shape.dynamic_width, top_k = shape.dynamic_top_k;
  const int rounds = dynamic_rounds(shape.length, width);
  const std::size_t w = static_cast<std::size_t>(width);
  std::vector<int> placeholder_parents(static_cast<std::size_t>(rounds - 1) * w);
  std::iota(placeholder_parents.begin(), placeholder_parents.end(), -1);
  const std::vector<int> placeholders(w, 0);
  std::vector<std::vector<int>> positions;
  for (const DeviceChain& c : chains) positions.emplace_back(w, c.first.positions.back() + 1);
  ChainRounds out;
  out.draft.dynamic = DynamicDraft{shape.length, width, top_k};
  for (std::size_t i = 0; i < chains.size(); ++i) {
    out.draw_of.emplace_back(static_cast<std::size_t>(shape.length));
    std::iota(out.draw_of.back().begin(), out.draw_of.back().end(), static_cast<int>(i) * shape.length);
  }
  for (int r = 0; r < rounds; ++r) {
    std::vector<SequenceRows> parts;
    for (std::size_t i = 0; i < chains.size(); ++i) {
      const DeviceChain& c = chains[i];
      if (r == 0)
        parts.push_back(c.first);
      else
        parts.push_back(SequenceRows{c.first.seq, placeholders, positions[i],
                                     std::span(placeholder_parents).first(static_cast<std::size_t>(r) * w),
                                     RowLogits::kAll});
      out.draft.feeds.insert(out.draft.feeds.end(), parts.back().tokens.size(), -1);
      const std::size_t contexts = r == 0 ? 1 : w;
      out.draft.options.insert(out.draft.options.end(), contexts, c.options);
      out.draft.children.insert(out.draft.children.end(), contexts, top_k);
      out.draft.child_modes.insert(out.draft.child_modes.end(), contexts, kDrawTopK);
      out.draft.uniforms.insert(out.draft.uniforms.end(), contexts * static_cast<std::size_t>(top_k), 0.0);
    }
    add_round(context, parts, out);
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
      const ChainRounds plan = plan_dynamic_rounds(*this, chains);
      const std::vector<double> seconds = backend.forward_draft(plan.draft, cache.storage(), workspace, tokens, {}, parents);
      std::vector<RoundTime> times;
      for (std::size_t r = 0; r < seconds.size(); ++r) times.push_back(RoundTime{plan.round_rows[r], seconds[r]});
      return times;
    });
  return with_rollback(cache, chains, [&] {
    const ChainRounds plan = plan_chain_rounds(*this, chains, !q.empty());
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
    ChainRounds plan = dynamic ? plan_dynamic_rounds(*this, chains) : plan_chain_rounds(*this, chains, sampled);
    EnqueuedChains out;
    out.draws = backend.enqueue_draft(plan.draft, cache.storage(), workspace);
    out.draw_of = std::move(plan.draw_of);
    out.round_rows = std::move(plan.round_rows);
    return out;
  });
}

}  // namespace specula
