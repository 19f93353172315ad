#include "runtime/scheduler_limits.h"

#include <algorithm>
#include <climits>

#include "base/error.h"
#include "draft/sequoia_tree.h"
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
  if (!d.sequoia.empty()) {
    shape.topology = sequoia_tree(d.sequoia, d.tree_budget, d.tree_budget);
  } else if (d.tree_budget > 0) {
    shape.dynamic_budget = d.tree_budget;
  } else if (!d.tree.empty()) {
    shape.topology = branching_topology(d.tree);
  } else {
    shape.topology = chain_topology(d.gamma);
  }
  return shape;
}

int max_tree_nodes(const DraftOptions& d) { return d.method == DraftMethod::kNone ? 0 : draft_tree_nodes(d); }

int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

int append_blocks(int length, int rows, int block_size) {
  return blocks_for(length + rows, block_size) - blocks_for(length, block_size) + 1;
}

long long kv_blocks_for(long long shared_tokens, long long own_tokens, long long sequences, int block_size) {
  const auto blocks = [block_size](long long tokens) { return (tokens + block_size - 1) / block_size; };
  return blocks(shared_tokens) + (blocks(own_tokens) + 1) * sequences;
}

int request_kv_blocks(const GenerateOptions& o, int sequences) {
  const long long prompt = static_cast<long long>(o.prompt_ids.size());
  const int bs = o.kv_block_size;
  const long long tree = max_tree_nodes(o.draft);
  long long blocks;
  if (o.sampling.strategy == Strategy::kBeam) {
    // Live beams, their forks during a step, and the root; with a drafter the 2W beams and
    // forks each with its largest tree.
    blocks = o.draft.method == DraftMethod::kNone
                 ? kv_blocks_for(0, prompt + o.max_new_tokens, 4LL * o.sampling.beam_width + 2, bs)
                 : kv_blocks_for(prompt, o.max_new_tokens + tree + 1, 2LL * o.sampling.beam_width + 1, bs);
  } else {
    // Side by side forks of the prompt; at least what one sample recomputed alone needs.
    const long long own = o.max_new_tokens + tree + 1;
    blocks = std::max(kv_blocks_for(prompt, own, sequences, bs),
                      kv_blocks_for(0, prompt, 1, bs) + kv_blocks_for(0, prompt + own, 1, bs));
  }
  return static_cast<int>(std::min<long long>(blocks, INT_MAX));  // validation refuses what saturates
}

int request_min_kv_blocks(const GenerateOptions& o) {
  const long long prompt = static_cast<long long>(o.prompt_ids.size());
  const long long full = prompt + o.max_new_tokens + 1 + max_tree_nodes(o.draft);
  const long long bs = o.kv_block_size;
  const long long need = (prompt + bs - 1) / bs + (full + bs - 1) / bs + 2;
  return static_cast<int>(std::min<long long>(need, INT_MAX));
}

void check_request_fits(const GenerateOptions& o, const SchedulerLimits& limits) {
  const int prompt = static_cast<int>(o.prompt_ids.size());
  const int step_rows = 1 + max_tree_nodes(o.draft);
  SPECULA_CHECK(step_rows <= limits.max_rows, "scheduler: a request's step needs ", step_rows,
                " rows (the root and a tree of ", step_rows - 1, " nodes), over max_rows (", limits.max_rows, ")");
  const int need = request_min_kv_blocks(o);
  SPECULA_CHECK(need <= limits.kv_blocks, "scheduler: a request of ", prompt, " prompt tokens and ", o.max_new_tokens,
                " new tokens needs ", need, " KV blocks of ", o.kv_block_size, " slots alone, over the pool (",
                limits.kv_blocks, " blocks)");
}

}  // namespace specula
