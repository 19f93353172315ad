#include "engine/chain_rounds.h"

#include <algorithm>
#include <numeric>

namespace specula {
namespace {

// One more round of `parts`: its batch planned on `cache` (`config`'s bounds) and its slots appended.
void add_round(KvCache& cache, const ModelConfig& config, std::span<const SequenceRows> parts, ChainRounds& out) {
  RaggedBatch batch = plan_batch(parts, cache.tables(), config);
  const std::vector<int> counts = batch.rows_per_seq();
  out.draft.plans.push_back(cache.prepare(batch.seqs, counts));
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

// A logit row of context `context` (0 the root, 1 + n after node n) under control set `set`:
// its path's draws, the nodes from the root down to node n.
void add_path(std::span<const int> draw_of, std::span<const int> parents, int context, int set, DraftControls& out) {
  out.row_set.push_back(set);
  const std::size_t start = out.path_draws.size();
  append_path_nodes(parents, context, out.path_draws);
  for (std::size_t k = start; k < out.path_draws.size(); ++k)
    out.path_draws[k] = draw_of[static_cast<std::size_t>(out.path_draws[k])];
  out.path_first.push_back(static_cast<int>(out.path_draws.size()));
}

}  // namespace

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
      SPECULA_CHECK(c.controls == nullptr, "device draft: dynamic tree ", i,
                    " has logit controls; dynamic trees take none on the device");
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

ChainRounds plan_chain_rounds(KvCache& cache, const ModelConfig& config, std::span<const DeviceChain> chains, bool keep_q) {
  ChainRounds out;
  std::vector<ChainShape> shapes;
  int rounds = 0;
  std::size_t widest = 0;
  for (const DeviceChain& c : chains) {
    shapes.push_back(shape_of(c));
    rounds = std::max(rounds, shapes.back().depth_max);
    widest = std::max(widest, static_cast<std::size_t>(c.length));
  }
  const bool children = std::any_of(chains.begin(), chains.end(), [](const DeviceChain& c) { return c.is_tree(); });
  const bool controls =
      std::any_of(chains.begin(), chains.end(), [](const DeviceChain& c) { return c.controls != nullptr; });
  std::vector<int> set_of(chains.size(), -1);  // each chain's control set
  if (controls) {
    out.draft.controls.path_first.push_back(0);
    for (std::size_t i = 0; i < chains.size(); ++i) {
      if (chains[i].controls == nullptr) continue;
      set_of[i] = static_cast<int>(out.draft.controls.sets.size());
      out.draft.controls.sets.push_back(chains[i].controls);
    }
  }
  const std::vector<int> placeholders(widest, 0);
  out.draft.keep_q = keep_q;
  out.draw_of.resize(chains.size());
  for (std::size_t i = 0; i < chains.size(); ++i) out.draw_of[i].resize(static_cast<std::size_t>(chains[i].length));
  // context_row[i][c]: the row (across rounds) of chain i's context c, whose output state
  // its children's rows take.
  std::vector<std::vector<int>> context_row(chains.size());
  for (std::size_t i = 0; i < chains.size(); ++i) context_row[i].resize(static_cast<std::size_t>(chains[i].length) + 1);
  int drawn = 0, row = 0;
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
        out.state_feeds.insert(out.state_feeds.end(), c.first.tokens.size(), -1);
        row += static_cast<int>(c.first.tokens.size());
        context_row[i][0] = row - 1;
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
          out.state_feeds.push_back(context_row[i][static_cast<std::size_t>(shape.parents[n] + 1)]);
          context_row[i][n + 1] = row++;
          contexts.push_back(static_cast<int>(n) + 1);
        }
      }
      for (const int context : contexts) {
        const std::vector<int>& kids = shape.children[static_cast<std::size_t>(context)];
        out.draft.options.push_back(c.options);
        if (controls) add_path(out.draw_of[i], shape.parents, context, set_of[i], out.draft.controls);
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
    add_round(cache, config, parts, out);
  }
  return out;
}

ChainRounds plan_dynamic_rounds(KvCache& cache, const ModelConfig& config, std::span<const DeviceChain> chains) {
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
  std::vector<int> root_row;  // [chains] each tree's root context row (its last first row)
  int first_rows = 0;
  for (const DeviceChain& c : chains) {
    first_rows += static_cast<int>(c.first.tokens.size());
    root_row.push_back(first_rows - 1);
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
      out.state_feeds.insert(out.state_feeds.end(), parts.back().tokens.size(), r == 0 ? -1 : root_row[i]);
      const std::size_t contexts = r == 0 ? 1 : w;
      out.draft.options.insert(out.draft.options.end(), contexts, c.options);
      out.draft.children.insert(out.draft.children.end(), contexts, top_k);
      out.draft.child_modes.insert(out.draft.child_modes.end(), contexts, kDrawTopK);
      out.draft.uniforms.insert(out.draft.uniforms.end(), contexts * static_cast<std::size_t>(top_k), 0.0);
    }
    add_round(cache, config, parts, out);
  }
  return out;
}

}  // namespace specula
