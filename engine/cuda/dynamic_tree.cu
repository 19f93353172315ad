// The dynamic-tree kernels. Of draft rounds (DraftRounds::dynamic, engine/device_draft.h): after
// a round's children kernel, each sequence pushes the candidates of the contexts the round fed
// and takes its next batch of nodes, as draft/tree_growth.cpp's advance_dynamic does on the
// host, then writes the next round's rows from them. Of a verify step reading such trees: their
// rows' positions and masks from the nodes' parents.
#include <cmath>

#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/cuda_draws.cuh"
#include "engine/cuda/kernels.cuh"
#include "engine/device_draft.h"

namespace specula::cuda {
namespace {

constexpr int kGrowThreads = 128;

// The candidate not yet taken of the largest score, the earliest pushed among equals (the host's
// priority queue order); -1 when every one is taken.
__device__ int best_candidate(const DynamicCandidate* pool, int size, BlockShared& sh) {
  double best = 0;
  int at = -1;
  for (int i = threadIdx.x; i < size; i += blockDim.x)
    if (!pool[i].taken && (at < 0 || pool[i].score > best)) best = pool[i].score, at = i;
  return block_argmax(best, at, sh);
}

// One block per sequence.
__global__ void grow_dynamic_kernel(DynamicTreeArgs a) {
  __shared__ BlockShared sh;
  const int s = blockIdx.x;
  const std::size_t nodes_at = static_cast<std::size_t>(s) * static_cast<std::size_t>(a.budget);
  int* tokens = a.node_tokens + nodes_at;
  int* parents = a.node_parents + nodes_at;
  int* depth = a.node_depth + nodes_at;
  double* score = a.node_score + nodes_at;
  DynamicCandidate* pool = a.pool + static_cast<std::size_t>(s) * static_cast<std::size_t>(a.pool_cap);
  int* size = a.pool_size + s;

  // Push, in node order then rank order: the push order breaks ties.
  if (threadIdx.x == 0) {
    if (a.round == 0) *size = 0;
    const int contexts = a.round == 0 ? 1 : a.width;
    for (int c = 0; c < contexts; ++c) {
      const int node = a.round == 0 ? -1 : (a.round - 1) * a.width + c;
      if (node >= 0 && tokens[node] < 0) continue;  // an absent node has no children
      const int row = a.round == 0 ? s : s * a.width + c;  // its logit row in the round
      const float* q = a.probs + static_cast<std::size_t>(row) * static_cast<std::size_t>(a.vocab);
      const int* children = a.children + static_cast<std::size_t>(row) * static_cast<std::size_t>(a.top_k);
      for (int k = 0; k < a.top_k; ++k) {
        const int token = children[k];
        if (token < 0) break;  // the distribution gives no more (or the row was refused)
        DynamicCandidate& added = pool[(*size)++];
        added.score = (node < 0 ? 0.0 : score[node]) + log(static_cast<double>(q[token]));
        added.parent = node;
        added.token = token;
        added.depth = node < 0 ? 1 : depth[node] + 1;
        added.taken = 0;
      }
    }
  }
  __syncthreads();

  // Take the next batch: nodes [first, first + count).
  const int first = a.round * a.width;
  const int count = a.budget - first < a.width ? a.budget - first : a.width;
  for (int k = 0; k < count; ++k) {
    const int best = best_candidate(pool, *size, sh);
    if (threadIdx.x == 0) {
      const int node = first + k;
      if (best < 0) {
        tokens[node] = kAbsentDraw;
        parents[node] = -1;
        depth[node] = 1;
        score[node] = 0;
      } else {
        DynamicCandidate& taken = pool[best];
        taken.taken = 1;
        tokens[node] = taken.token;
        parents[node] = taken.parent;
        depth[node] = taken.depth;
        score[node] = taken.score;
      }
    }
    __syncthreads();
  }

  // The next round feeds them: node first + k at the sequence's row k, under its ancestors (an
  // absent one under nothing, token 0: nothing reads it).
  if (a.next_rows == nullptr) return;
  for (int k = threadIdx.x; k < a.width; k += blockDim.x) {
    const int node = first + k;
    RowDesc& row = a.next_rows[static_cast<std::size_t>(s) * static_cast<std::size_t>(a.width) + k];
    const bool present = tokens[node] >= 0;
    if (a.next_state_rows && present && parents[node] >= 0) {
      const int p = parents[node];  // fed in round p / width + 1, the sequence's row p % width there
      a.next_state_rows[s * a.width + k] = a.first_rows + (p / a.width) * a.sequences * a.width + s * a.width + p % a.width;
    }
    const int d = present ? depth[node] : 1;
    const int tree_start = row.prefix_len;     // a tree row's prefix ends where its tree starts
    const int root_position = row.position - 1;  // the placeholder's position is the root's + 1
    row.token = present ? tokens[node] : 0;
    row.position = root_position + d;
    row.num_extra = d;
    if (a.window > 0) row.first = row.position - a.window + 1 > 0 ? row.position - a.window + 1 : 0;
    std::int32_t* mask = a.next_mask + row.extra_begin;
    int at = node;
    for (int i = d - 1; i >= 0; --i) {
      mask[i] = tree_start + at;
      at = present ? parents[at] : -1;
    }
  }
}

// One block per tree, a thread per node.
__global__ void tree_rows_kernel(TreeRowsArgs a) {
  const int t = blockIdx.x;
  const int root = a.trees_at[2 * t], first = a.trees_at[2 * t + 1];
  const int* tokens = a.node_tokens + first;
  const int* parents = a.node_parents + first;
  const int root_position = a.rows[root].position;
  for (int i = threadIdx.x; i < a.budget; i += blockDim.x) {
    RowDesc& row = a.rows[root + 1 + i];
    const bool present = tokens[i] >= 0;
    int depth = 1;
    if (present)
      for (int at = parents[i]; at >= 0; at = parents[at]) ++depth;
    const int root_slot = row.prefix_len;
    row.position = root_position + depth;
    row.num_extra = depth + 1;
    row.first = a.window > 0 && row.position - a.window + 1 > 0 ? row.position - a.window + 1 : 0;
    std::int32_t* mask = a.mask + row.extra_begin;
    mask[0] = root_slot;
    int at = i;
    for (int k = depth; k >= 1; --k) {
      mask[k] = root_slot + 1 + at;
      at = present ? parents[at] : -1;
    }
  }
}

}  // namespace

void launch_tree_rows(const TreeRowsArgs& args, cudaStream_t stream) {
  if (args.trees == 0) return;
  SPECULA_LAUNCH(tree_rows_kernel, dim3(args.trees), dim3(kGrowThreads), 0, stream, args);
  CUDA_CHECK_LAUNCH();
}

void launch_grow_dynamic(const DynamicTreeArgs& args, cudaStream_t stream) {
  if (args.sequences == 0) return;
  SPECULA_LAUNCH(grow_dynamic_kernel, dim3(args.sequences), dim3(kGrowThreads), 0, stream, args);
  CUDA_CHECK_LAUNCH();
}

DynamicTreeArgs dynamic_tree_args(const DraftUpload& up, int round, unsigned char* base, const float* probs,
                                  const int* children, int vocab, int window) {
  const std::size_t next = static_cast<std::size_t>(round) + 1;
  DynamicTreeArgs a;
  a.round = round;
  a.sequences = up.sequences;
  a.width = up.dynamic.width;
  a.top_k = up.dynamic.top_k;
  a.budget = up.dynamic.budget;
  a.vocab = vocab;
  a.window = window;
  a.pool_cap = up.pool_cap;
  a.probs = probs;
  a.children = children;
  a.pool = reinterpret_cast<DynamicCandidate*>(base + up.at.pool);
  a.pool_size = reinterpret_cast<int*>(base + up.at.pool_size);
  a.node_tokens = reinterpret_cast<int*>(base + up.at.node_tokens);
  a.node_parents = reinterpret_cast<int*>(base + up.at.node_parents);
  a.node_depth = reinterpret_cast<int*>(base + up.at.node_depth);
  a.node_score = reinterpret_cast<double*>(base + up.at.node_score);
  if (next < up.steps.size()) {
    auto* step = reinterpret_cast<std::int32_t*>(base + up.step_at[next]);
    a.next_rows = reinterpret_cast<RowDesc*>(step + up.steps[next].layout.rows);
    a.next_mask = step + up.steps[next].layout.mask;
  }
  return a;
}

}  // namespace specula::cuda
