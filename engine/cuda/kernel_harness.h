// defines: the CUDA-free test harness of the CUDA kernels: each function uploads host inputs,
// fills the device outputs with NaN first (so an unwritten element fails), runs one launcher on
// a stream of its own and returns what the kernel wrote, so that tests compare every kernel
// with the CPU function it must equal. Pages travel as a host PageStorage (F32), converted to
// `page_dtype` on the device and back. Without the CUDA module (cuda_loader.cpp) every function
// throws.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "engine/batch.h"
#include "engine/device_draft.h"
#include "engine/cuda/cuda_plan.h"
#include "model/safetensors.h"
#include "kv/kv_plan.h"
#include "kv/page_storage.h"

namespace specula::cuda::harness {

// launch_embed over `tokens` of `table` (any stored dtype).  out [tokens, hidden]
std::vector<float> embed(const TensorView& table, std::span<const int> tokens);
// launch_rms_norm.  x: [n, dim]; out [n, dim]
std::vector<float> rms_norm(std::span<const float> x, std::span<const float> weight, float eps, int n, int dim);
// launch_silu_mul.  gate_up: [n, 2 ffn] (gate | up); out [n, ffn]
std::vector<float> silu_mul(std::span<const float> gate_up, int n, int ffn);

// The batch-invariant kernel, or launch_linear with cublas_prefill (cuBLASLt above kSmallRows rows).
enum class MatmulPath { kSmall, kCublasPrefill };
// y = x W^T + bias (or y_in + that when accumulate).  x: [n, in]; w: [out, in] bf16 bits;
// bias: [out] or empty; y_in: [n, out] (read when accumulate); out [n, out]
std::vector<float> matmul(std::span<const float> x, std::span<const std::uint16_t> w, std::span<const float> bias,
                          std::span<const float> y_in, int n, int in, int out, bool accumulate, MatmulPath path);

// launch_qk_rope_store for `batch`'s rows in `layer`: q/k norms (empty: none), RoPE, k and v
// into `pages` (updated), q rotated in place.  qkv: [n, q_dim + 2 kv_dim]; returns the qkv rows.
std::vector<float> qk_rope_store(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, DType page_dtype,
                                 int layer, std::span<const float> qkv, std::span<const float> inv_freq,
                                 std::span<const float> q_norm, std::span<const float> k_norm, float eps, int num_heads);

// launch_attention for `batch` in `layer` (sliding `window`, 0: none).
//   q: [n, num_heads * head_dim]; out [n, num_heads * head_dim]
std::vector<float> attention(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, DType page_dtype,
                             int layer, int num_heads, int window, std::span<const float> q);

// launch_kv_copies on `pages` (updated from the device afterwards).
void kv_copies(std::span<const KvCopy> copies, PageStorage& pages, DType page_dtype);

// A batch of flat draft trees (engine/cuda/verify_tree.h's layout) and what to verify it with.
struct TreeBatch {
  std::vector<int> node_indptr;   // [sequences + 1]
  std::vector<int> tokens;        // [nodes]
  std::vector<int> parent;        // [nodes] local to the sequence, -1 = the root
  std::vector<int> draw;          // [contexts] kDraw* codes (stochastic)
  std::vector<int> argmax;        // [contexts] the target's argmax (greedy)
  std::vector<float> p;           // [contexts, vocab] (stochastic)
  std::vector<float> q;           // [contexts, vocab] or empty (stochastic)
  std::vector<double> uniforms;   // [2 nodes + sequences] (stochastic)
  std::vector<int> rule;          // [sequences] kRule* codes (stochastic)
  int vocab = 0;
};
// What the kernels wrote; entries past a sequence's own stay -1 (the poison).
struct TreeVerdicts {
  std::vector<int> accepted_count;  // [sequences]
  std::vector<int> accepted_nodes;  // [nodes]
  std::vector<int> tokens;          // [contexts]
};
// launch_verify_greedy (argmax) or launch_verify_stochastic (draw, p, q, uniforms, rule) on `batch`.
TreeVerdicts verify_tree(const TreeBatch& batch, bool greedy);

// A batch of rows to sample (launch_sample): logits and each row's options.
struct SamplingBatch {
  std::vector<float> logits;        // [rows, vocab]
  std::vector<float> temperature;   // [rows], 0: greedy
  std::vector<int> top_k;           // [rows], 0: none
  std::vector<float> top_p;         // [rows], 1: none
  std::vector<float> min_p;         // [rows], 0: none
  std::vector<double> uniforms;     // [rows] or empty (no draws but greedy rows')
  int vocab = 0;
};
struct SampledRows {
  std::vector<float> probs;  // [rows, vocab]
  std::vector<int> tokens;   // [rows]; -1: invalid row, or no uniform for a sampled row
};
// launch_sample on `batch`.
SampledRows sample(const SamplingBatch& batch);

// Draft contexts whose children to draw (launch_draw_children).
struct ChildrenBatch {
  std::vector<float> probs;        // [contexts, vocab]
  std::vector<int> child_first;    // [contexts + 1]
  std::vector<int> mode;           // [contexts] kDraw* codes
  std::vector<int> source;         // [contexts] or empty (none)
  std::vector<double> uniforms;    // [draws]
  std::vector<int> tokens;         // [draws] in: the source draws' tokens (the rest is overwritten)
  int vocab = 0;
};
// launch_draw_children on `batch`: the tokens after it.
std::vector<int> draw_children(const ChildrenBatch& batch);

// Rows edited by logit controls over paths drawn on the device (launch_edit_logits), laid out
// as a draft's (append_edit_rows).
struct EditBatch {
  std::vector<float> logits;  // [rows, vocab]
  DraftControls controls;     // [rows] (its sets the caller's); path_draws index tokens
  std::vector<int> tokens;    // the draws' tokens
  int vocab = 0;
};
// launch_edit_logits on `batch`: the rows after it.
std::vector<float> edit_logits(const EditBatch& batch);

// Dynamic trees grown round by round (launch_grow_dynamic): round r's logit rows (one a sequence
// in round 0, `width` a sequence after) and each row's top_k children (kAbsentDraw past its last).
struct DynamicBatch {
  int sequences = 0, width = 0, top_k = 0, budget = 0, vocab = 0;
  std::vector<std::vector<float>> probs;   // [rounds][round's logit rows, vocab]
  std::vector<std::vector<int>> children;  // [rounds][round's logit rows, top_k]
  std::vector<int> tree_start;             // [sequences] the next rows' prefix_len (the tree's first slot)
  std::vector<int> root_position;          // [sequences] the root's position (the next rows' placeholders': its + 1)
};
// What the kernel wrote: the nodes, and the rows each round but the last wrote for the next
// (row sequence * width + k's mask room at (sequence * width + k) * budget, poisoned before).
struct DynamicGrowth {
  std::vector<int> tokens;                 // [sequences, budget]
  std::vector<int> parents;                // [sequences, budget]
  std::vector<std::vector<RowDesc>> rows;  // [rounds - 1][sequences * width]
  std::vector<std::vector<int>> masks;     // [rounds - 1][sequences * width * budget]
};
DynamicGrowth grow_dynamic(const DynamicBatch& batch);

// Dynamic trees' rows in a verify step's upload (launch_tree_rows): the step as pack_step lays
// it out (the trees planned as chains), the trees' roots and nodes.
struct TreeRowsBatch {
  std::vector<std::int32_t> upload;  // StepUpload::data
  StepLayout layout;
  std::vector<int> trees_at;         // [trees, 2] each tree's root row and first node
  std::vector<int> node_tokens;      // [nodes] (kAbsentDraw: none)
  std::vector<int> node_parents;     // [nodes] within each tree (-1: the root)
  int budget = 0, window = 0;
};
// The upload after the kernel.
std::vector<std::int32_t> tree_rows(const TreeRowsBatch& batch);

}  // namespace specula::cuda::harness
