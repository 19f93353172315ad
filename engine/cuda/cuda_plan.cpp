#include "engine/cuda/cuda_plan.h"

#include <algorithm>
#include <bit>

#include "base/error.h"

namespace specula::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

double mib(std::size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kMiB); }

int pow2_at_least(int n, int floor) { return static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::max(n, floor)))); }

}  // namespace

void check_cuda_support(const ModelConfig& c, std::optional<MatrixFormat> matrices_as, const CudaOptions& o) {
  SPECULA_CHECK(!matrices_as || *matrices_as == MatrixFormat::kBF16,
                "backend 'cuda': matrices are read in bf16 on the GPU; ", name_of(*matrices_as),
                " (--weights / --draft-weights, target.weights / draft.weights) is not supported there");
  SPECULA_CHECK(o.kv_dtype == KvDType::kF32 || o.kv_dtype == KvDType::kBF16, "backend 'cuda': KV pages in ",
                name_of(o.kv_dtype), " are not supported (f32 or bf16)");
  SPECULA_CHECK(o.max_rows > 0 && o.max_logit_rows > 0, "backend 'cuda': max_rows and max_logit_rows must be positive, got ",
                o.max_rows, " and ", o.max_logit_rows);
  const int head_dim = c.head_dim();
  SPECULA_CHECK(head_dim % 2 == 0 && head_dim <= kMaxHeadDim, "backend 'cuda': head_dim ", head_dim,
                " is not supported (even, at most ", kMaxHeadDim, ")");
  const struct {
    const char* name;
    int value;
  } inner[] = {{"hidden_size", c.hidden_size}, {"heads x head_dim", c.q_dim()}, {"intermediate_size", c.intermediate_size}};
  for (const auto& d : inner)
    SPECULA_CHECK(d.value % kMatmulKStep == 0, "backend 'cuda': ", d.name, " ", d.value, " is not a multiple of ",
                  kMatmulKStep, " (the matrix kernel reads 16 bytes at a time)");
}

WeightPlan plan_weights(const Model& model) {
  const ModelConfig& c = model.config();
  WeightPlan plan;
  const auto add = [&](std::string name, DType dtype, std::int64_t rows, std::int64_t cols,
                       std::vector<const TensorView*> sources, std::vector<std::int64_t> source_rows) {
    WeightTensor t{std::move(name), dtype, rows, cols, plan.arena_bytes, std::move(sources), std::move(source_rows)};
    plan.arena_bytes = align_up(plan.arena_bytes + t.bytes());
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size()) - 1;
  };
  const auto matrix = [&](std::string name, std::vector<const TensorView*> parts) {
    std::vector<std::int64_t> rows;
    std::int64_t total = 0;
    for (const TensorView* p : parts) rows.push_back(p->shape[0]), total += p->shape[0];
    const std::int64_t cols = parts.front()->shape[1];
    const int index = add(std::move(name), DType::BF16, total, cols, std::move(parts), std::move(rows));
    plan.matrix_bytes += plan.tensors.back().bytes();
    return index;
  };
  // A fused bias: present when any part has one; the others are zeros of their width.
  const auto bias = [&](std::string name, std::vector<const TensorView*> parts, std::vector<std::int64_t> widths) {
    if (std::none_of(parts.begin(), parts.end(), [](const TensorView* p) { return p != nullptr; })) return -1;
    std::int64_t total = 0;
    for (std::int64_t w : widths) total += w;
    return add(std::move(name), DType::F32, 1, total, std::move(parts), std::move(widths));
  };
  const auto vector = [&](std::string name, const TensorView* t) {
    return t ? add(std::move(name), DType::F32, 1, t->numel(), {t}, {t->numel()}) : -1;
  };
  const std::int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.intermediate_size, hidden = c.hidden_size;
  const TensorView& embed = model.embed_tokens();
  plan.embed = add("embed_tokens", embed.dtype, embed.shape[0], embed.shape[1], {&embed}, {embed.shape[0]});
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    const LayerWeights& l = model.layers()[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    LayerTensors t;
    t.qkv = matrix(p + "qkv", {l.q, l.k, l.v});
    t.qkv_bias = bias(p + "qkv_bias", {l.q_bias, l.k_bias, l.v_bias}, {q_dim, kv_dim, kv_dim});
    t.o = matrix(p + "o", {l.o});
    t.o_bias = bias(p + "o_bias", {l.o_bias}, {hidden});
    t.gate_up = matrix(p + "gate_up", {l.gate, l.up});
    t.gate_up_bias = bias(p + "gate_up_bias", {l.gate_bias, l.up_bias}, {ffn, ffn});
    t.down = matrix(p + "down", {l.down});
    t.down_bias = bias(p + "down_bias", {l.down_bias}, {hidden});
    t.attn_norm = vector(p + "attn_norm", l.attn_norm);
    t.mlp_norm = vector(p + "mlp_norm", l.mlp_norm);
    t.q_norm = vector(p + "q_norm", l.q_norm);
    t.k_norm = vector(p + "k_norm", l.k_norm);
    plan.layers.push_back(t);
  }
  plan.final_norm = vector("final_norm", &model.final_norm());
  plan.lm_head = matrix("lm_head", {&model.lm_head()});
  plan.inv_freq = add("inv_freq", DType::F32, 1, c.head_dim() / 2, {nullptr}, {c.head_dim() / 2});
  return plan;
}

std::size_t workspace_bytes(const ModelConfig& c, const CudaOptions& o) {
  const std::size_t rows = static_cast<std::size_t>(o.max_rows);
  const std::size_t hidden = static_cast<std::size_t>(c.hidden_size), q_dim = static_cast<std::size_t>(c.q_dim());
  const std::size_t kv_dim = static_cast<std::size_t>(c.kv_dim()), ffn = static_cast<std::size_t>(c.intermediate_size);
  const std::size_t widest = std::max({hidden, q_dim, ffn});
  const std::size_t widest_out = std::max({q_dim + 2 * kv_dim, 2 * ffn, hidden});  // lm_head has no epilogue
  std::size_t bytes = 0;
  const auto buffer = [&](std::size_t b) { bytes += align_up(b); };
  buffer(rows * hidden * 4);                  // x, the residual stream
  buffer(rows * hidden * 4);                  // h, the normalised rows
  buffer(rows * (q_dim + 2 * kv_dim) * 4);    // qkv
  buffer(rows * q_dim * 4);                   // attention output
  buffer(rows * 2 * ffn * 4);                 // gate | up
  buffer(rows * ffn * 4);                     // silu(gate) * up
  buffer(rows * widest * 2);                  // bf16 copy of a cuBLASLt input
  buffer(rows * widest_out * 4);              // cuBLASLt output before its bias / residual epilogue
  buffer(static_cast<std::size_t>(o.max_logit_rows) * hidden * 4);                      // the rows that want logits
  buffer(static_cast<std::size_t>(o.max_logit_rows) * static_cast<std::size_t>(c.vocab_size) * 4);  // logits
  buffer(kPlannedUploadBytes);                // the step upload (grown past this on demand)
  buffer(kCublasWorkspace);
  return bytes;
}

std::size_t kv_pages_bytes(const KvLayout& layout, int num_blocks) {
  return static_cast<std::size_t>(layout.num_layers) * static_cast<std::size_t>(num_blocks) * 2 *
         static_cast<std::size_t>(layout.block_size) * static_cast<std::size_t>(layout.kv_dim()) * kv_dtype_size(layout.dtype);
}

MemoryPlan plan_memory(const WeightPlan& weights, const ModelConfig& config, const CudaOptions& options,
                       std::size_t free_bytes, std::size_t total_bytes) {
  MemoryPlan plan{weights.arena_bytes, workspace_bytes(config, options), options.kv_pool_bytes};
  const std::size_t fixed = plan.weights + plan.workspace;
  if (plan.kv_pool == 0 && fixed < free_bytes) plan.kv_pool = (free_bytes - fixed) / 10 * 9;
  const auto sizes = [&] {
    return detail::concat("weights ", mib(plan.weights), " MiB + workspace ", mib(plan.workspace), " MiB (", options.max_rows,
                          " rows) + KV pool ", mib(plan.kv_pool), " MiB = ", mib(plan.total()), " MiB; the GPU has ",
                          mib(free_bytes), " MiB free of ", mib(total_bytes), " MiB");
  };
  if (plan.total() > free_bytes || fixed >= free_bytes)
    throw ResourceExhausted("backend 'cuda': the model does not fit on the GPU: " + sizes());
  if (plan.kv_pool < kMiB) throw ResourceExhausted("backend 'cuda': no room for a KV pool: " + sizes());
  return plan;
}

std::vector<std::size_t> GraphKey::shape() const {
  std::vector<std::size_t> out;
  for (const int v : {num_rows, num_logits, pages_cap, mask_cap, keys_cap}) out.push_back(static_cast<std::size_t>(v));
  out.push_back(static_cast<std::size_t>(pages_id));
  return out;
}

StepLayout step_layout(const GraphKey& key) {
  StepLayout l;
  l.rows = 0;
  l.pages = l.rows + 8 * static_cast<std::size_t>(key.num_rows);
  l.mask = l.pages + static_cast<std::size_t>(key.pages_cap);
  l.logit_rows = l.mask + static_cast<std::size_t>(key.mask_cap);
  l.size = l.logit_rows + static_cast<std::size_t>(key.num_logits);
  return l;
}

StepUpload pack_step(const RaggedBatch& batch, const KvPlan& plan, int window, const CudaOptions& options,
                     std::uint64_t pages_id) {
  const int n = batch.num_rows();
  SPECULA_CHECK(n <= options.max_rows, "backend 'cuda': a forward of ", n, " rows exceeds the workspace's ",
                options.max_rows, " (max_rows); split the prefill");
  SPECULA_CHECK(batch.num_logits() <= options.max_logit_rows, "backend 'cuda': a forward returning ", batch.num_logits(),
                " logit rows exceeds the workspace's ", options.max_logit_rows, " (max_logit_rows)");
  StepUpload up;
  std::vector<RowDesc> rows(static_cast<std::size_t>(n));
  for (int s = 0; s < batch.num_seqs(); ++s) {
    const std::size_t su = static_cast<std::size_t>(s);
    for (int r = batch.row_indptr[su]; r < batch.row_indptr[su + 1]; ++r) {
      const std::size_t ru = static_cast<std::size_t>(r);
      RowDesc d{batch.tokens[ru], batch.positions[ru], plan.row_slots[ru], plan.kv_indptr[su], batch.visible_prefix[su],
                batch.mask_indptr[ru], batch.mask_indptr[ru + 1] - batch.mask_indptr[ru], 0};
      if (d.num_extra == 0) d.prefix_len += r - batch.row_indptr[su] + 1;  // causal: up to the row's own slot
      if (window > 0) d.first = std::max(0, d.position - window + 1);
      up.max_keys = std::max(up.max_keys, d.prefix_len + d.num_extra - d.first);
      rows[ru] = d;
    }
  }
  up.key = GraphKey{n,
                    batch.num_logits(),
                    pow2_at_least(static_cast<int>(plan.kv_indices.size()), 64),
                    batch.mask_indices.empty() ? 0 : pow2_at_least(static_cast<int>(batch.mask_indices.size()), 64),
                    keys_capacity(up.max_keys),
                    pages_id};
  up.layout = step_layout(up.key);
  up.data.assign(up.layout.size, 0);
  const auto put = [&](std::size_t at, const int* src, std::size_t count) { std::copy_n(src, count, up.data.begin() + at); };
  put(up.layout.rows, reinterpret_cast<const int*>(rows.data()), 8 * rows.size());
  put(up.layout.pages, plan.kv_indices.data(), plan.kv_indices.size());
  put(up.layout.mask, batch.mask_indices.data(), batch.mask_indices.size());
  put(up.layout.logit_rows, batch.logit_rows.data(), batch.logit_rows.size());
  return up;
}

bool graph_eligible(const GraphKey& key, const CudaOptions& options) {
  return options.graphs && key.num_rows <= kSmallRows && key.num_logits <= kSmallRows;
}

std::size_t attention_smem_bytes(int keys_cap, int head_dim) {
  return static_cast<std::size_t>(keys_cap) * (sizeof(float) + sizeof(std::int32_t)) +
         static_cast<std::size_t>(head_dim + kAttentionScratchFloats) * sizeof(float);
}

int keys_capacity(int max_keys) {
  if (max_keys <= kKeysStep) return pow2_at_least(max_keys, 256);
  return (max_keys + kKeysStep - 1) / kKeysStep * kKeysStep;
}

int max_attention_keys(std::size_t max_shared_bytes, int head_dim) {
  const std::size_t per_key = sizeof(float) + sizeof(std::int32_t),
                    head = static_cast<std::size_t>(head_dim + kAttentionScratchFloats) * sizeof(float);
  if (max_shared_bytes < head + 256 * per_key) return 0;
  const int fits = static_cast<int>((max_shared_bytes - head) / per_key);
  return fits <= kKeysStep ? static_cast<int>(std::bit_floor(static_cast<unsigned>(fits))) : fits / kKeysStep * kKeysStep;
}

std::vector<std::int32_t> pack_copies(std::span<const KvCopy> copies) {
  std::vector<std::int32_t> out;
  out.reserve(3 * copies.size());
  for (const KvCopy& c : copies) {
    out.push_back(c.kind == KvCopy::Kind::kBlock ? 0 : 1);
    out.push_back(c.src);
    out.push_back(c.dst);
  }
  return out;
}

}  // namespace specula::cuda
