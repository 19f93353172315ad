// defines: the launchers of the CUDA module's kernels (ops.cu, attention.cu, matmul.cu,
// verify_tree.cu, sample.cu, dynamic_tree.cu, logprobs.cu, logit_edits.cu), each taking its stream, and the device views
// they share. Every launcher checks its launch (CUDA_CHECK_LAUNCH). Shapes are row-major;
// "rows" are the batch's rows in order.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "base/dtype.h"
#include "engine/cuda/cuda_plan.h"
#include "engine/cuda/draft_plan.h"
#include "engine/cuda/verify_plan.h"
#include "engine/cuda/launch.cuh"

namespace specula::cuda {

// One layer's KV pages on the device: [num_blocks, 2 (K, V), block_size, kv_dim] of `dtype`
// (F32 or BF16), the layout of kv/page_storage.h.
struct DevicePagesView {
  void* layer0 = nullptr;          // layer 0's block 0; layer l starts layer_stride elements on
  std::size_t layer_stride = 0;    // elements from one layer to the next
  int block_size = 0;
  int kv_dim = 0;
  int num_layers = 0;
  DType dtype = DType::F32;
  std::size_t block_stride() const { return 2 * static_cast<std::size_t>(block_size) * static_cast<std::size_t>(kv_dim); }
};

// x[r] = embedding row rows[r].token as f32 (cpu: weight_row of model.embed_tokens()).
//   table: in [vocab, hidden] of `dtype`; x: out [n, hidden]
void launch_embed(const void* table, DType dtype, const RowDesc* rows, float* x, int n, int hidden, cudaStream_t stream);

// y[i] = rms_norm(x[gather ? gather[i] : i]) * weight (cpu::rms_norm).
//   x: in [*, dim]; weight: in [dim]; y: out [n, dim] (may alias x when gather is null)
void launch_rms_norm(const float* x, const int* gather, const float* weight, float eps, float* y, int n, int dim,
                     cudaStream_t stream);

// Per row: Qwen3's per-head RMSNorm of q and k (when q_norm is not null), RoPE on q and k at
// the row's position (cpu::RopeTable::apply), q written back in place, k and v stored at the
// row's slot of `pages` in `layer` (cpu_backend.cpp's copy into PageStorage::row).
//   qkv: in/out [n, q_dim + 2 kv_dim]; inv_freq: in [head_dim / 2]; q_norm, k_norm: in [head_dim] or null
void launch_qk_rope_store(float* qkv, const RowDesc* rows, const float* inv_freq, const float* q_norm,
                          const float* k_norm, float eps, int n, int num_heads, int num_kv_heads, int head_dim,
                          const DevicePagesView& pages, int layer, cudaStream_t stream);

// Paged attention of every row and query head over the keys the row sees (cpu::attend_batch:
// scores scaled by 1/sqrt(head_dim), softmax, weighted sum of values, keys in position order).
//   q: in [n, num_heads * head_dim] (RoPE applied, in qkv with row stride q_stride);
//   pages_list, mask: the step upload's page lists and visibility slots; out: out [n, num_heads * head_dim]
// Raises both attention kernels' dynamic shared memory limit to `max_shared_bytes` (the
// device's opt-in maximum). Once, before any launch or capture: a limit changed between
// launches would invalidate graphs captured with a larger one.
void prepare_attention(int max_shared_bytes);
void launch_attention(const float* q, int q_stride, const RowDesc* rows, const int* pages_list, const int* mask, int n,
                      int num_heads, int num_kv_heads, int head_dim, int keys_cap, const DevicePagesView& pages,
                      int layer, float* out, cudaStream_t stream);

// act[r, i] = silu(gu[r, i]) * gu[r, ffn + i] (cpu::silu_mul over gate | up).
//   gu: in [n, 2 ffn]; act: out [n, ffn]
void launch_silu_mul(const float* gu, float* act, int n, int ffn, cudaStream_t stream);

// Tokens drawn on the device, gathered: dst[i * dst_stride] = drawn[index[i]] where index[i] >= 0,
// unchanged where -1. A negative draw (refused, -1, or absent, kAbsentDraw) gives token 0
// unless keep_negative: what reads a row's token then is discarded. With dst the first
// RowDesc's token and dst_stride kRowDescInts, it feeds a step's rows; with keep_negative, a
// verification's nodes (an absent node is skipped there), or their parents (a dynamic tree's).
//   drawn: in [*]; index: in [n]; dst: in/out [n, dst_stride], the first int of each
void launch_gather_tokens(const int* drawn, const int* index, int* dst, int dst_stride, int n, bool keep_negative,
                          cudaStream_t stream);
inline constexpr int kRowDescInts = static_cast<int>(sizeof(RowDesc) / sizeof(int));
static_assert(offsetof(RowDesc, token) == 0);

// dst[r] = src[gather ? gather[r] : r] for n rows of `dim` floats (a gather, or one half of a
// concatenation when dst_stride is wider than dim); a row whose gather is negative is left.
//   src: in [*, src_stride]; gather: in [n] or null; dst: out [n, dst_stride], the first dim of each row
void launch_copy_rows(const float* src, int src_stride, const int* gather, float* dst, int dst_stride, int n, int dim,
                      cudaStream_t stream);

// dst[r, columns[j]] = src[r, j] for n rows, every other entry of dst `fill` (an EAGLE head's
// draft-vocabulary logits laid into the target's vocabulary, -inf elsewhere). Columns distinct.
//   src: in [n, src_dim]; columns: in [src_dim], each in [0, dst_dim); dst: out [n, dst_dim]
void launch_spread_columns(const float* src, int src_dim, const int* columns, float fill, float* dst, int dst_dim,
                           int n, cudaStream_t stream);

// x[i] += silu(z[i]) (Medusa's residual block x + SiLU(W x + b), with z = W x + b).
//   z: in [count]; x: in/out [count]
void launch_add_silu(const float* z, float* x, std::size_t count, cudaStream_t stream);

// The copy list (pack_copies: {kind, src, dst}) in order, every layer, keys and values
// (PageStorage::execute). One kernel: a block per layer walks the list.
void launch_kv_copies(const std::int32_t* copies, int num_copies, const DevicePagesView& pages, cudaStream_t stream);

// Tree verification of a batch of sequences (verify_tree.h's flat layout, one block per
// sequence): for each, the accepted path root-down, its tokens then one bonus / corrected token,
// exactly as verify_greedy / verify_stochastic (verify/verifier.h) emit them. Entries past a
// sequence's own are not written. The inputs are taken to be what the CPU functions accept
// (parents before their nodes, tokens in the vocabulary, q where it is read): nothing is
// checked on the device. A node of negative token (kAbsentDraw) is absent, and so is every
// node under it: the verdict is the CPU's over the tree of the present nodes, each keeping its
// uniform and its context's rows (the accepted nodes numbered as here).
//   node_indptr: in [num_sequences + 1]; tokens, parent: in [nodes] (parents local, -1 = root,
//   each smaller than its node); accepted_count: out [num_sequences];
//   accepted_nodes: out [nodes] (sequence s's count at node_indptr[s], local indices);
//   out_tokens: out [contexts] (sequence s's count + 1 at its first context)
// Greedy: argmax: in [contexts], the target's argmax at each context.
void launch_verify_greedy(const int* node_indptr, const int* tokens, const int* parent, const int* argmax,
                          int num_sequences, int* accepted_count, int* accepted_nodes, int* out_tokens,
                          cudaStream_t stream);
// Stochastic: draw: in [contexts] (kDraw* codes); p: in [contexts, vocab]; q: in [contexts,
// vocab], read only at contexts with children drawn kDrawSampled / kDrawWithoutReplacement
// (null when there is none); uniforms: in [2 nodes + num_sequences], each sequence's
// verify_uniform_count in verify/verifier.h's layout; rule: in [num_sequences] kRule* codes
// (verify_stochastic, verify_block for a chain, verify_traversal); scratch_first: in
// [num_sequences] where each sequence's scratch starts in workspace (verify_tree.h's
// scratch_doubles). A context whose target row has no mass emits
// token -1 (the CPU throws).
void launch_verify_stochastic(const int* node_indptr, const int* tokens, const int* parent, const int* draw,
                              const float* p, const float* q, const double* uniforms, const int* rule, int vocab,
                              int num_sequences, const long long* scratch_first, double* workspace,
                              int* accepted_count, int* accepted_nodes, int* out_tokens, cudaStream_t stream);

// The emitted tokens' log-probabilities after a verification (logprobs.cu, one block per
// context slot): slot first_context + k of a sequence s with source[s] >= 0 (kLogprob*) and
// k <= counts[s] is its emitted token k, drawn at context 0 (k = 0) or after accepted node
// k - 1; its row is logit row first_logit + context of `logits` (raw) or context
// first_context + context of `probs` (processed). Writes out[slot]: the token's
// log-probability and the top[s] most probable alternatives (sampling/token_logprob.h), token
// -1 past them; other slots are not written.
struct LogprobArgs {
  int contexts = 0, vocab = 0;
  const int* sequence = nullptr;  // in [contexts] each slot's sequence (the verification's numbering)
  const int* source = nullptr;    // in [sequences] kLogprob* code, -1: none asked
  const int* top = nullptr;       // in [sequences] alternatives asked
  const int* first = nullptr;     // in [sequences, 3] first context, first node, first logit row
  const int* counts = nullptr;    // in [sequences] accepted counts
  const int* accepted = nullptr;  // in [nodes] accepted nodes
  const int* emitted = nullptr;   // in [contexts] emitted tokens
  const float* logits = nullptr;  // in [logit rows, vocab]
  const float* probs = nullptr;   // in [contexts, vocab]
  EmittedLogprob* out = nullptr;  // out [contexts]
};
void launch_emitted_logprobs(const LogprobArgs& args, cudaStream_t stream);

// The logit controls' edits of rows (logit_edits.cu, one block per row): row r edited as
// edit_rows[r] says (PathEditRow), bit for bit as sampling/logit_controls.h's edited_logit.
struct LogitEditArgs {
  int rows = 0, vocab = 0;
  const unsigned char* base = nullptr;    // in: the buffer the rows' offsets point into
  const PathEditRow* edit_rows = nullptr; // in [rows]
  const int* tokens = nullptr;            // in: the tokens the rows' paths index
  float* logits = nullptr;                // in/out [rows, vocab]
};
void launch_edit_logits(const LogitEditArgs& args, cudaStream_t stream);

// Sampling of a batch of rows (sample.cu, one block per row): the distribution of
// sampling/logit_transforms.h's chain for the row's options (temperature, then top-k when
// top_k > 0, top-p when top_p < 1, min-p when min_p > 0; options already validated), or
// greedy's one-hot at the first index of the largest logit when temperature is 0; then, when
// `uniforms` and `tokens` are given, one inverse-CDF draw per row (greedy rows: the argmax,
// uniforms or not). A row the CPU refuses (a NaN or +inf score, every logit -inf, a NaN or +inf
// greedy logit) gets NaN probabilities and token -1. Needs no scratch beyond its outputs.
// Exactness against chain_distribution and inverse_cdf: sample.cu's header.
//   logits: in [rows, vocab]; temperature, top_p, min_p: in [rows] float; top_k: in [rows] int;
//   uniforms: in [rows] in [0, 1) or null; probs: out [rows, vocab] (zeros outside the support;
//   must not alias logits); tokens: out [rows] or null
void launch_sample(const float* logits, const float* temperature, const int* top_k, const float* top_p,
                   const float* min_p, const double* uniforms, int rows, int vocab, float* probs, int* tokens,
                   cudaStream_t stream);

// The children of draft contexts drawn from their distributions (sample.cu, one block per
// context), as draw_siblings (draft/sibling_draw.h) draws them with the same uniforms: context
// c's children are draws [child_first[c], child_first[c + 1]) of `tokens`, drawn by mode[c]
// (kDraw*, engine/device_verify.h) from row c of `probs`, child j with uniforms[child_first[c]
// + j] (unread for kDrawTopK). A child draw_siblings would not give (q exhausted) is
// kAbsentDraw. Every child of a context whose row is invalid (launch_sample's NaN row) is -1,
// and of a context whose source draw (source[c] >= 0, an earlier draw: the token its row was
// fed) is negative, that draw's code.
//   probs: in [contexts, vocab]; child_first: in [contexts + 1]; mode: in [contexts];
//   source: in [contexts] or null; uniforms: in [draws]; tokens: in/out [draws]
void launch_draw_children(const float* probs, int vocab, int contexts, const int* child_first, const int* mode,
                          const int* source, const double* uniforms, int* tokens, cudaStream_t stream);

// One round of dynamic trees (DraftRounds::dynamic, one block per sequence): the contexts the
// round fed push their children (the root in round 0; else the sequence's nodes (round - 1) *
// width .. round * width - 1, an absent one none), each child its top-k draw of the context's
// logit row in rank order, scored by its parent's score plus the log of its probability; then
// nodes round * width .. (the next width, within budget) take the best candidates not yet taken
// (score, then push order), kAbsentDraw where none is left; then, where next_rows is given, the
// next round's row k of the sequence (row sequence * width + k) becomes node round * width + k:
// its token, position (the root's + depth, the row's placeholder position being the root's + 1),
// first key (window) and tree mask (its ancestors' slots and its own, root first, in the room
// the row's placeholder mask has); and, where
// next_state_rows is given (a head's rounds), the row whose output state that row takes: its
// node's parent's row (rows numbered across rounds: round 0's first_rows, then `width` a
// sequence a round, so the parent p fed in round p / width + 1), left as it is where the node
// is the root's child or absent.
struct DynamicTreeArgs {
  int round = 0, sequences = 0, width = 0, top_k = 0, budget = 0, vocab = 0, window = 0, pool_cap = 0;
  const float* probs = nullptr;     // in [the round's logit rows, vocab]
  const int* children = nullptr;    // in [the round's logit rows, top_k] launch_draw_children's kDrawTopK draws
  DynamicCandidate* pool = nullptr; // in/out [sequences, pool_cap]
  int* pool_size = nullptr;         // in/out [sequences] (round 0 resets it)
  int* node_tokens = nullptr;       // in/out [sequences, budget] (kAbsentDraw: no node)
  int* node_parents = nullptr;      // in/out [sequences, budget] (-1: the root)
  int* node_depth = nullptr;        // in/out [sequences, budget]
  double* node_score = nullptr;     // in/out [sequences, budget]
  RowDesc* next_rows = nullptr;     // in/out [sequences * width] the next round's rows, or null in the last round
  std::int32_t* next_mask = nullptr;  // in/out the next round's mask array
  int* next_state_rows = nullptr;   // in/out [sequences * width] the next round's state feeds, or null
  int first_rows = 0;               // round 0's rows, where next_state_rows is given
};
void launch_grow_dynamic(const DynamicTreeArgs& args, cudaStream_t stream);

// The rows of dynamic trees a verify step reads from their draft device (DeviceVerify::draws
// of dynamic trees): tree t's root is step row trees[2 t], its n = budget nodes the rows after
// it, planned as a chain (node i's mask room i + 2 entries from its extra_begin); node i,
// draw trees[2 t + 1] + i, gets position (the root's + its depth), window start and mask: the
// root's slot (the rows' prefix_len), then its ancestors' and its own (root slot + 1 + node),
// root first. An absent node (token < 0) sits under the root alone, at depth 1.
struct TreeRowsArgs {
  int trees = 0, budget = 0, window = 0;
  const int* trees_at = nullptr;      // in [trees, 2] each tree's root row and first draw
  const int* node_tokens = nullptr;   // in [*] drawn nodes (kAbsentDraw: none)
  const int* node_parents = nullptr;  // in [*] each node's parent within its tree (-1: the root)
  RowDesc* rows = nullptr;            // in/out the step's rows
  std::int32_t* mask = nullptr;       // in/out the step's mask array
};
void launch_tree_rows(const TreeRowsArgs& args, cudaStream_t stream);

// y = x W^T + bias, or y += (x W^T + bias) when `accumulate` (cpu::matmul, add_bias,
// add_inplace): the batch-invariant kernel (each output element reduced over k in one fixed
// order whatever n), or, for more than kSmallRows rows when scratch.cublas_prefill,
// cuBLASLt (x rounded to bf16, f32 accumulate) and then the same epilogue.
//   x: in [n, in] f32; w: in [out, in] bf16; bias: in [out] or null; y: in/out [n, out]
struct GemmPlan;  // cuBLASLt's descriptors and algorithm for one product shape (matmul.cu)
// The plans a workspace made, by (n, in, out), each made once and freed with the workspace.
struct GemmPlans {
  std::map<std::tuple<int, int, int>, std::unique_ptr<GemmPlan>> by_shape;
  GemmPlans();
  GemmPlans(const GemmPlans&) = delete;
  GemmPlans& operator=(const GemmPlans&) = delete;
  ~GemmPlans();
};
struct GemmScratch {
  bool cublas_prefill = false;        // CudaOptions::cublas_prefill
  GemmPlans* plans = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;          // kCublasWorkspace bytes
  __nv_bfloat16* x_bf16 = nullptr;    // [max_rows, widest in]
  float* tmp = nullptr;               // [max_rows, widest out] before the epilogue
};
void launch_linear(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int n, int in, int out,
                   bool accumulate, const GemmScratch& scratch, cudaStream_t stream);
// The batch-invariant kernel alone (tests compare it with cuBLASLt and the CPU).
void launch_matmul_small(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int n, int in, int out,
                         bool accumulate, cudaStream_t stream);

}  // namespace specula::cuda
