#include "runtime/scheduler_limits.h"

#include <algorithm>

#include "base/error.h"
#include "runtime/decoders.h"

namespace specula {

void validate_limits(const SchedulerLimits& l) {
  SPECULA_CHECK(l.max_sequences >= 1, "scheduler: max_sequences must be >= 1, got ", l.max_sequences);
  SPECULA_CHECK(l.max_rows >= 1, "scheduler: max_rows must be >= 1, got ", l.max_rows);
  SPECULA_CHECK(l.prefill_tokens >= 1, "scheduler: prefill_tokens must be >= 1, got ", l.prefill_tokens);
  SPECULA_CHECK(l.kv_blocks >= 1, "scheduler: kv_blocks must be >= 1, got ", l.kv_blocks);
}

TreeShape tree_shape(const DraftOptions& d) {
  TreeShape shape;
  shape.adaptive = d.adaptive;
  if (d.tree_budget > 0) {
    shape.dynamic_budget = d.tree_budget;
  } else if (!d.tree.empty()) {
    shape.branching = d.tree;
  } else {
    shape.branching.assign(static_cast<std::size_t>(d.gamma), 1);
  }
  return shape;
}

int max_tree_nodes(const DraftOptions& d) {
  if (d.method == DraftMethod::kNone) return 0;
  if (d.method == DraftMethod::kNgram) return d.gamma;
  if (d.tree_budget > 0) return d.tree_budget;
  if (d.tree.empty()) return d.adaptive ? ModelDrafter::kMaxAdaptiveGamma : d.gamma;
  int nodes = 0, level = 1;
  for (int b : d.tree) nodes += (level *= b);
  return nodes;
}

int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

int append_blocks(int length, int rows, int block_size) {
  return blocks_for(length + rows, block_size) - blocks_for(length, block_size) + 1;
}

int request_kv_blocks(const GenerateOptions& o, int sequences) {
  const int prompt = static_cast<int>(o.prompt_ids.size());
  const int own = o.max_new_tokens + max_tree_nodes(o.draft) + 1;
  // Side by side forks of the prompt; at least what one sample recomputed alone needs.
  return std::max(kv_blocks_for(prompt, own, sequences, o.kv_block_size),
                  blocks_for(prompt, o.kv_block_size) + blocks_for(prompt + own, o.kv_block_size) + 2);
}

int kv_blocks_for(int shared_tokens, int own_tokens, int sequences, int block_size) {
  return blocks_for(shared_tokens, block_size) + (blocks_for(own_tokens, block_size) + 1) * sequences;
}

void check_request_fits(const GenerateOptions& o, const SchedulerLimits& limits) {
  const int prompt = static_cast<int>(o.prompt_ids.size());
  const int step_rows = 1 + max_tree_nodes(o.draft);
  SPECULA_CHECK(step_rows <= limits.max_rows, "scheduler: a request's step needs ", step_rows,
                " rows (the root and a tree of ", step_rows - 1, " nodes), over max_rows (", limits.max_rows, ")");
  // The parked shared prompt and one sample recomputed from scratch at its longest.
  const int full = prompt + o.max_new_tokens + step_rows;
  const int need = blocks_for(prompt, o.kv_block_size) + blocks_for(full, o.kv_block_size) + 2;
  SPECULA_CHECK(need <= limits.kv_blocks, "scheduler: a request of ", prompt, " prompt tokens and ", o.max_new_tokens,
                " new tokens needs ", need, " KV blocks of ", o.kv_block_size, " slots alone, over the pool (",
                limits.kv_blocks, " blocks)");
}

}  // namespace specula
