// defines: the host-side half of the CUDA backend, CUDA-free so that the CPU suite (and the
// ASan build, which has no CUDA) tests it: CudaOptions (KV dtype, pool size, rows per forward,
// graphs), the refusals of what the kernels do not handle (check_cuda_support and the per-batch
// checks), the weight arena layout (plan_weights: every device tensor's offset, dtype and
// sources), the memory plan made before the first token (plan_memory: weights + workspace + KV
// pool against the card's free memory, refused with the sizes named), the one host-to-device
// upload of a step (pack_step: per-row descriptors, page lists, visibility lists, logit rows,
// at offsets fixed by the graph key's capacities), the key of a captured decode graph,
// append_aligned (one array of an upload at its aligned offset) and PathEditRow (one row's logit
// controls in an upload).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "engine/batch.h"
#include "engine/matrix_format.h"
#include "model/model.h"
#include "kv/kv_plan.h"
#include "kv/page_storage.h"

namespace specula::cuda {

struct CudaOptions {
  KvDType kv_dtype = KvDType::kBF16;  // KV pages: bf16 or f32 (int8 pages are host-only)
  std::size_t kv_pool_bytes = 0;  // device memory for the KV pages of every cache; 0: 90% of what is left
  int max_rows = 4096;            // rows one forward may hold (sizes the workspace)
  int max_logit_rows = 512;       // logit rows one forward may return
  bool graphs = true;             // capture decode steps (<= kSmallRows rows) as CUDA graphs
  int max_graphs = 64;            // graphs of each kind a workspace keeps; past it the least recently replayed goes
  // Matrix products of forwards over kSmallRows rows through cuBLASLt (activations rounded to
  // bf16, the library's own reduction order): faster prefill, but a row's results then depend
  // on the forward's row count. Off: every product runs the batch-invariant kernel.
  bool cublas_prefill = false;
};

// The largest step captured as a graph, and the row count above which cublas_prefill applies.
inline constexpr int kSmallRows = 64;
// The attention kernel keeps a head in registers and shared memory up to this size.
inline constexpr int kMaxHeadDim = 256;
// Every matrix's inner dimension is read 8 bf16 (16 bytes) at a time.
inline constexpr int kMatmulKStep = 8;
// Device tensors start at multiples of this many bytes.
inline constexpr std::size_t kAlign = 256;

// The step upload each workspace reserves (int32s of StepUpload::data; a larger step grows it
// and drops the captured graphs, which hold its address), and cuBLASLt's workspace.
inline constexpr std::size_t kPlannedUploadBytes = std::size_t{16} << 20;
inline constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;

inline std::size_t align_up(std::size_t n, std::size_t a = kAlign) { return (n + a - 1) / a * a; }

// Appends `count` elements of `src` to an upload at the next multiple of kAlign; returns where.
template <class T>
std::size_t append_aligned(std::vector<unsigned char>& data, const T* src, std::size_t count) {
  const std::size_t at = align_up(data.size());
  data.resize(at + count * sizeof(T), 0);
  if (count > 0) std::memcpy(data.data() + at, src, count * sizeof(T));
  return at;
}

// One row's logit controls as the edit kernel reads them (launch_edit_logits): its edits, EOS
// ids and path lie at byte offsets into the kernel's buffer, so that their number may change
// from call to call while nothing a captured graph is keyed on moves. The row becomes what
// sampling/logit_controls.h's PathEdits rule makes of it: the edits (ascending tokens; a
// host-known path's tokens already in them) merged with the path's tokens, then the EOS ids'
// -inf while the path is shorter than eos_until.
struct PathEditRow {
  std::int64_t edits_at = 0;  // [edits] TokenEdit
  std::int64_t eos_at = 0;    // [eos] int
  std::int64_t path_at = 0;   // [path] int, indices into the kernel's tokens, root first
  int edits = 0, eos = 0, path = 0;
  int eos_until = 0;
  float repetition = 1, frequency = 0, presence = 0;
};

// Throws SpeculaError naming what the CUDA kernels do not handle: matrices read as anything but
// bf16 (`--draft-weights` f16/f32), KV pages other than F32/BF16, an inner dimension not a
// multiple of 8, head_dim odd or above kMaxHeadDim, non-positive limits.
void check_cuda_support(const ModelConfig& config, std::optional<MatrixFormat> matrices_as, const CudaOptions& options);

// One device tensor of the weight arena: `sources` concatenated along the rows (q, k, v into
// one [q_dim + 2 kv_dim, hidden] matrix; gate, up into [2 ffn, hidden]); a missing source (a
// bias the model lacks inside a fused bias) is zeros. source_rows: the rows each source gives
// a matrix, or the width each gives a vector (rows 1).
struct WeightTensor {
  std::string name;
  DType dtype = DType::BF16;        // on the device: BF16 matrices, F32 norms and biases, the embedding as stored
  std::int64_t rows = 0, cols = 0;  // [rows, cols] (a vector: rows 1)
  std::size_t offset = 0;           // bytes from the arena's start, kAlign-aligned
  std::vector<const TensorView*> sources;  // null entries: zeros
  std::vector<std::int64_t> source_rows;   // rows (matrix) or width (vector) of each source
  std::size_t bytes() const { return static_cast<std::size_t>(rows * cols) * dtype_size(dtype); }
};

// Per layer, the indices into WeightPlan::tensors (-1: the model has none).
struct LayerTensors {
  int qkv = -1, qkv_bias = -1, o = -1, o_bias = -1, gate_up = -1, gate_up_bias = -1, down = -1, down_bias = -1;
  int attn_norm = -1, mlp_norm = -1, q_norm = -1, k_norm = -1;
};

struct WeightPlan {
  std::vector<WeightTensor> tensors;
  std::vector<LayerTensors> layers;
  int embed = -1, final_norm = -1, lm_head = -1, inv_freq = -1;
  std::size_t arena_bytes = 0;     // the one allocation
  std::size_t matrix_bytes = 0;    // what a decode step reads of the matrices (Backend::weight_bytes)
};

// The arena of `model` on the device (inv_freq is filled by the backend from RopeTable).
WeightPlan plan_weights(const Model& model);

// Device bytes of one workspace: activations of max_rows rows, the logits of max_logit_rows,
// the planned step upload, cuBLASLt's workspace.
std::size_t workspace_bytes(const ModelConfig& config, const CudaOptions& options);
// Device bytes of the pages of a cache of `num_blocks` blocks of `layout`.
std::size_t kv_pages_bytes(const KvLayout& layout, int num_blocks);

struct MemoryPlan {
  std::size_t weights = 0, workspace = 0, kv_pool = 0;
  std::size_t total() const { return weights + workspace + kv_pool; }
};

// Sizes everything before the first token from the card's `free_bytes` (of `total_bytes`).
// Throws ResourceExhausted naming each size when they do not fit, or when the default pool
// (90% of what weights and one workspace leave) would be under 1 MiB.
MemoryPlan plan_memory(const WeightPlan& weights, const ModelConfig& config, const CudaOptions& options,
                       std::size_t free_bytes, std::size_t total_bytes);

// One new row as the device kernels read it (8 ints, the upload's first array). The keys it
// sees are entries first .. prefix_len + num_extra - 1 of: slots 0 .. prefix_len - 1 of its
// sequence, then slots mask[extra_begin ..] (engine/cpu/attention.cpp's visible_rows), each
// slot s found in block pages[pages_begin + s / block_size].
struct RowDesc {
  std::int32_t token, position, slot, pages_begin, prefix_len, extra_begin, num_extra, first;
};
static_assert(sizeof(RowDesc) == 8 * sizeof(std::int32_t));

// The capacities a step's upload is laid out for; equal keys mean equal offsets and grid
// sizes, so a graph captured for one key replays for any batch of that key.
struct GraphKey {
  int num_rows = 0, num_logits = 0;
  int pages_cap = 0;   // >= the page-list length, a power of two >= 64
  int mask_cap = 0;    // >= the visibility-list length, a power of two >= 64 (0 when there is none)
  int keys_cap = 0;    // >= any row's key count: keys_capacity(max keys) (the attention's shared memory)
  std::uint64_t pages_id = 0;  // the device pages the step reads and writes (a graph holds their address and shape)
  bool operator==(const GraphKey&) const = default;
  // The fields above in order: equal exactly when the keys are.
  std::vector<std::size_t> shape() const;
};

// Where the arrays sit in StepUpload::data (in int32 units).
struct StepLayout {
  std::size_t rows = 0;        // [num_rows] RowDesc
  std::size_t pages = 0;       // [pages_cap] block ids, the sequences' page lists back to back
  std::size_t mask = 0;        // [mask_cap] visibility slots (batch.mask_indices)
  std::size_t logit_rows = 0;  // [num_logits] rows whose logits come back
  std::size_t size = 0;
};
StepLayout step_layout(const GraphKey& key);

struct StepUpload {
  GraphKey key;
  StepLayout layout;
  int max_keys = 0;               // the most keys any row sees
  std::vector<std::int32_t> data; // the one host -> device copy of the step
};

// The upload of `batch` under `plan` for a model with sliding `window` (0: none), into the
// device pages numbered `pages_id` (each allocation its own number). Throws
// SpeculaError when the batch exceeds the options' rows or logit rows.
StepUpload pack_step(const RaggedBatch& batch, const KvPlan& plan, int window, const CudaOptions& options,
                     std::uint64_t pages_id);

// Whether a step of this key is captured and replayed: small row counts only (cuBLASLt is
// never captured) and graphs on.
bool graph_eligible(const GraphKey& key, const CudaOptions& options);

// Floats of an attention block's reduction scratch: one partial per warp, at most 32 warps.
inline constexpr int kAttentionScratchFloats = 32;
// Shared memory of one attention block: scores and slots of keys_cap keys, the query head, the
// reduction scratch.
std::size_t attention_smem_bytes(int keys_cap, int head_dim);
// The key capacity a step whose rows see at most `max_keys` keys is planned for: a power of two
// from 256 to kKeysStep, then a multiple of kKeysStep (few graph keys, little shared memory lost).
inline constexpr int kKeysStep = 4096;
int keys_capacity(int max_keys);
// The most keys a row may see when a block has `max_shared_bytes` of shared memory: the largest
// key capacity whose attention block fits.
int max_attention_keys(std::size_t max_shared_bytes, int head_dim);

// The copy list as the device kernel reads it: {kind (0 block, 1 slot), src, dst} per copy.
std::vector<std::int32_t> pack_copies(std::span<const KvCopy> copies);

}  // namespace specula::cuda
