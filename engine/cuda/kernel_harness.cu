// The test harness of the kernels (kernel_harness.h): host inputs up, NaN-poisoned outputs,
// one launch, outputs back, all ordered on one stream of the call's own.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernel_harness.h"
#include "engine/cuda/kernels.cuh"
#include "engine/cuda/verify_tree.h"

namespace specula::cuda::harness {
namespace {

// The harness's stream: every copy, fill and launch of one harness call is ordered on it.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(s); }
};

// A device array of T on `stream`, freed on scope exit.
template <class T>
struct Device {
  T* ptr = nullptr;
  std::size_t count = 0;
  cudaStream_t stream;
  Device(std::size_t n, const Stream& on) : count(n), stream(on.s) {
    CUDA_CHECK(cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  Device(std::span<const T> host, const Stream& on) : Device(host.size(), on) { put(host); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(ptr); }
  void put(std::span<const T> host) {
    CUDA_CHECK(cudaMemcpyAsync(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  }
  std::vector<T> get() const {
    std::vector<T> out(count);
    CUDA_CHECK(cudaMemcpyAsync(out.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }
  void poison() {  // all-ones bytes: NaN as f32 (and -1 as int)
    CUDA_CHECK(cudaMemsetAsync(ptr, 0xff, count * sizeof(T), stream));
  }
};

template <class T>
std::span<const T> view(const std::vector<T>& v) {
  return std::span<const T>(v.data(), v.size());
}

// The pages of a host PageStorage on the device in `dtype` (layers back to back).
struct DevicePagesCopy {
  Device<unsigned char> bytes;
  DevicePagesView view;
  DevicePagesCopy(const PageStorage& pages, DType dtype, const Stream& on)
      : bytes(static_cast<std::size_t>(pages.layout().num_layers) * pages.num_blocks() * pages.block_stride() *
                  dtype_size(dtype),
              on) {
    const KvLayout& l = pages.layout();
    view = DevicePagesView{bytes.ptr, pages.num_blocks() * pages.block_stride(), l.block_size, l.kv_dim(), l.num_layers,
                           dtype};
    std::vector<unsigned char> host(bytes.count);
    const std::size_t per_layer = view.layer_stride;
    for (int layer = 0; layer < l.num_layers; ++layer)
      for (std::size_t i = 0; i < per_layer; ++i)
        store_value(pages.layer(layer)[i], dtype, host.data() + (layer * per_layer + i) * dtype_size(dtype));
    bytes.put(host);
  }
  // The device pages back into `pages` as f32.
  void download(PageStorage& pages) const {
    const std::vector<unsigned char> host = bytes.get();
    const std::size_t per_layer = view.layer_stride;
    for (int layer = 0; layer < view.num_layers; ++layer)
      for (std::size_t i = 0; i < per_layer; ++i) {
        const unsigned char* at = host.data() + (layer * per_layer + i) * dtype_size(view.dtype);
        float v;
        if (view.dtype == DType::F32) {
          std::memcpy(&v, at, 4);
        } else {  // BF16: the high half of an f32
          std::uint32_t bits = 0;
          std::uint16_t half;
          std::memcpy(&half, at, 2);
          bits = static_cast<std::uint32_t>(half) << 16;
          std::memcpy(&v, &bits, 4);
        }
        pages.layer(layer)[i] = v;
      }
  }
};

}  // namespace

std::vector<float> embed(const TensorView& table, std::span<const int> tokens) {
  const int n = static_cast<int>(tokens.size());
  const int hidden = static_cast<int>(table.shape[1]);
  std::vector<RowDesc> rows(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) rows[i] = RowDesc{tokens[i], 0, 0, 0, 0, 0, 0, 0};
  const Stream s;
  Device<unsigned char> t(std::span(static_cast<const unsigned char*>(table.data),
                                    static_cast<std::size_t>(table.numel()) * dtype_size(table.dtype)),
                          s);
  Device<RowDesc> r(view(rows), s);
  Device<float> out(static_cast<std::size_t>(n) * hidden, s);
  out.poison();
  launch_embed(t.ptr, table.dtype, r.ptr, out.ptr, n, hidden, s.s);
  return out.get();
}

std::vector<float> rms_norm(std::span<const float> x, std::span<const float> weight, float eps, int n, int dim) {
  const Stream s;
  Device<float> dx(x, s), dw(weight, s), out(x.size(), s);
  out.poison();
  launch_rms_norm(dx.ptr, nullptr, dw.ptr, eps, out.ptr, n, dim, s.s);
  return out.get();
}

std::vector<float> silu_mul(std::span<const float> gate_up, int n, int ffn) {
  const Stream s;
  Device<float> gu(gate_up, s), out(static_cast<std::size_t>(n) * ffn, s);
  out.poison();
  launch_silu_mul(gu.ptr, out.ptr, n, ffn, s.s);
  return out.get();
}

std::vector<float> matmul(std::span<const float> x, std::span<const std::uint16_t> w, std::span<const float> bias,
                          std::span<const float> y_in, int n, int in, int out, bool accumulate, MatmulPath path) {
  const Stream s;
  Device<float> dx(x, s), db(bias, s), dy(static_cast<std::size_t>(n) * out, s);
  Device<std::uint16_t> dw(w, s);
  if (accumulate)
    dy.put(y_in);
  else
    dy.poison();
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(dw.ptr);
  const float* bp = bias.empty() ? nullptr : db.ptr;
  if (path == MatmulPath::kSmall) {
    launch_matmul_small(dx.ptr, wb, bp, dy.ptr, n, in, out, accumulate, s.s);
    return dy.get();
  }
  cublasLtHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  const std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, decltype(&cublasLtDestroy)> owner(handle, &cublasLtDestroy);
  Device<unsigned char> ws(kCublasWorkspace, s);
  Device<__nv_bfloat16> xb(x.size(), s);
  Device<float> tmp(static_cast<std::size_t>(n) * out, s);
  GemmPlans plans;
  launch_linear(dx.ptr, wb, bp, dy.ptr, n, in, out, accumulate, GemmScratch{true, &plans, handle, ws.ptr, xb.ptr, tmp.ptr},
                s.s);
  return dy.get();
}

std::vector<float> qk_rope_store(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, DType page_dtype,
                                 int layer, std::span<const float> qkv, std::span<const float> inv_freq,
                                 std::span<const float> q_norm, std::span<const float> k_norm, float eps, int num_heads) {
  const KvLayout& l = pages.layout();
  const StepUpload up = pack_step(batch, plan, 0, CudaOptions{}, 1);
  const Stream s;
  Device<std::int32_t> upload(view(up.data), s);
  Device<float> dqkv(qkv, s), freq(inv_freq, s), qn(q_norm, s), kn(k_norm, s);
  DevicePagesCopy dp(pages, page_dtype, s);
  launch_qk_rope_store(dqkv.ptr, reinterpret_cast<const RowDesc*>(upload.ptr + up.layout.rows), freq.ptr,
                       q_norm.empty() ? nullptr : qn.ptr, k_norm.empty() ? nullptr : kn.ptr, eps, batch.num_rows(),
                       num_heads, l.num_kv_heads, l.head_dim, dp.view, layer, s.s);
  dp.download(pages);
  return dqkv.get();
}

std::vector<float> attention(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, DType page_dtype,
                             int layer, int num_heads, int window, std::span<const float> q) {
  const KvLayout& l = pages.layout();
  const StepUpload up = pack_step(batch, plan, window, CudaOptions{}, 1);
  int max_shared = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  prepare_attention(max_shared);
  const Stream s;
  Device<std::int32_t> upload(view(up.data), s);
  Device<float> dq(q, s), out(q.size(), s);
  out.poison();
  DevicePagesCopy dp(pages, page_dtype, s);
  launch_attention(dq.ptr, num_heads * l.head_dim, reinterpret_cast<const RowDesc*>(upload.ptr + up.layout.rows),
                   upload.ptr + up.layout.pages, upload.ptr + up.layout.mask, batch.num_rows(), num_heads,
                   l.num_kv_heads, l.head_dim, up.key.keys_cap, dp.view, layer, out.ptr, s.s);
  return out.get();
}

void kv_copies(std::span<const KvCopy> copies, PageStorage& pages, DType page_dtype) {
  const std::vector<std::int32_t> packed = pack_copies(copies);
  const Stream s;
  Device<std::int32_t> dc(view(packed), s);
  DevicePagesCopy dp(pages, page_dtype, s);
  launch_kv_copies(dc.ptr, static_cast<int>(copies.size()), dp.view, s.s);
  dp.download(pages);
}

TreeVerdicts verify_tree(const TreeBatch& batch, bool greedy) {
  const int sequences = static_cast<int>(batch.node_indptr.size()) - 1;
  const std::size_t nodes = batch.tokens.size(), contexts = nodes + sequences;
  const Stream s;
  Device<int> indptr(view(batch.node_indptr), s), tokens(view(batch.tokens), s), parent(view(batch.parent), s);
  Device<int> count(sequences, s), accepted(nodes, s), out_tokens(contexts, s);
  count.poison();
  accepted.poison();
  out_tokens.poison();
  if (greedy) {
    Device<int> argmax(view(batch.argmax), s);
    launch_verify_greedy(indptr.ptr, tokens.ptr, parent.ptr, argmax.ptr, sequences, count.ptr, accepted.ptr,
                         out_tokens.ptr, s.s);
    return {count.get(), accepted.get(), out_tokens.get()};
  }
  Device<int> draw(view(batch.draw), s);
  Device<float> p(view(batch.p), s), q(view(batch.q), s);
  Device<double> uniforms(view(batch.uniforms), s);
  Device<int> rule(view(batch.rule), s);
  std::vector<long long> scratch_first;
  std::size_t scratch = 0;
  for (int seq = 0; seq < sequences; ++seq) {
    const std::span<const int> parents =
        std::span(batch.parent).subspan(static_cast<std::size_t>(batch.node_indptr[seq]),
                                        static_cast<std::size_t>(batch.node_indptr[seq + 1] - batch.node_indptr[seq]));
    scratch_first.push_back(static_cast<long long>(scratch));
    scratch += scratch_doubles(parents, batch.rule[static_cast<std::size_t>(seq)], batch.vocab);
  }
  Device<long long> first(view(scratch_first), s);
  Device<double> workspace(scratch, s);
  launch_verify_stochastic(indptr.ptr, tokens.ptr, parent.ptr, draw.ptr, p.ptr, batch.q.empty() ? nullptr : q.ptr,
                           uniforms.ptr, rule.ptr, batch.vocab, sequences, first.ptr, workspace.ptr, count.ptr,
                           accepted.ptr, out_tokens.ptr, s.s);
  return {count.get(), accepted.get(), out_tokens.get()};
}

SampledRows sample(const SamplingBatch& batch) {
  const int rows = static_cast<int>(batch.temperature.size());
  const Stream s;
  Device<float> logits(view(batch.logits), s), temperature(view(batch.temperature), s), top_p(view(batch.top_p), s),
      min_p(view(batch.min_p), s), probs(batch.logits.size(), s);
  Device<int> top_k(view(batch.top_k), s), tokens(rows, s);
  Device<double> uniforms(view(batch.uniforms), s);
  probs.poison();
  tokens.poison();
  launch_sample(logits.ptr, temperature.ptr, top_k.ptr, top_p.ptr, min_p.ptr,
                batch.uniforms.empty() ? nullptr : uniforms.ptr, rows, batch.vocab, probs.ptr, tokens.ptr, s.s);
  return {probs.get(), tokens.get()};
}

std::vector<int> draw_children(const ChildrenBatch& batch) {
  const int contexts = static_cast<int>(batch.mode.size());
  const Stream s;
  Device<float> probs(view(batch.probs), s);
  Device<int> first(view(batch.child_first), s), mode(view(batch.mode), s), source(view(batch.source), s),
      tokens(view(batch.tokens), s);
  Device<double> uniforms(view(batch.uniforms), s);
  launch_draw_children(probs.ptr, batch.vocab, contexts, first.ptr, mode.ptr,
                       batch.source.empty() ? nullptr : source.ptr, uniforms.ptr, tokens.ptr, s.s);
  return tokens.get();
}

std::vector<float> edit_logits(const EditBatch& batch) {
  const Stream s;
  const std::size_t rows = batch.controls.row_set.size();
  std::vector<unsigned char> data(rows * sizeof(PathEditRow));
  const std::vector<PathEditRow> edit_rows = append_edit_rows(data, batch.controls, 0);
  std::memcpy(data.data(), edit_rows.data(), rows * sizeof(PathEditRow));
  Device<unsigned char> base(view(data), s);
  Device<float> logits(view(batch.logits), s);
  Device<int> tokens(view(batch.tokens), s);
  LogitEditArgs a;
  a.rows = static_cast<int>(rows);
  a.vocab = batch.vocab;
  a.base = base.ptr;
  a.edit_rows = reinterpret_cast<const PathEditRow*>(base.ptr);
  a.tokens = tokens.ptr;
  a.logits = logits.ptr;
  launch_edit_logits(a, s.s);
  return logits.get();
}

DynamicGrowth grow_dynamic(const DynamicBatch& batch) {
  const Stream s;
  const std::size_t sequences = static_cast<std::size_t>(batch.sequences), budget = static_cast<std::size_t>(batch.budget);
  const std::size_t width = static_cast<std::size_t>(batch.width), rounds = batch.probs.size();
  const int pool_cap = DynamicDraft{batch.budget, batch.width, batch.top_k}.pool_cap();
  Device<DynamicCandidate> pool(sequences * static_cast<std::size_t>(pool_cap), s);
  Device<int> pool_size(sequences, s), tokens(sequences * budget, s), parents(sequences * budget, s),
      depth(sequences * budget, s);
  Device<double> score(sequences * budget, s);
  pool_size.poison();  // round 0 resets it
  tokens.poison();
  parents.poison();
  DynamicGrowth out;
  for (std::size_t r = 0; r < rounds; ++r) {
    Device<float> probs(view(batch.probs[r]), s);
    Device<int> children(view(batch.children[r]), s);
    const bool next = r + 1 < rounds;
    std::vector<RowDesc> placeholders(sequences * width);
    for (std::size_t i = 0; i < placeholders.size(); ++i)
      placeholders[i] = RowDesc{-1, batch.root_position[i / width] + 1, -1, -1, batch.tree_start[i / width],
                                static_cast<int>(i * budget), -1, 0};
    Device<RowDesc> rows(view(placeholders), s);
    Device<int> mask(sequences * width * budget, s);
    mask.poison();
    DynamicTreeArgs a;
    a.round = static_cast<int>(r);
    a.sequences = batch.sequences;
    a.width = batch.width;
    a.top_k = batch.top_k;
    a.budget = batch.budget;
    a.vocab = batch.vocab;
    a.pool_cap = pool_cap;
    a.probs = probs.ptr;
    a.children = children.ptr;
    a.pool = pool.ptr;
    a.pool_size = pool_size.ptr;
    a.node_tokens = tokens.ptr;
    a.node_parents = parents.ptr;
    a.node_depth = depth.ptr;
    a.node_score = score.ptr;
    a.next_rows = next ? rows.ptr : nullptr;
    a.next_mask = next ? mask.ptr : nullptr;
    launch_grow_dynamic(a, s.s);
    if (!next) continue;
    out.rows.push_back(rows.get());
    out.masks.push_back(mask.get());
  }
  out.tokens = tokens.get();
  out.parents = parents.get();
  return out;
}

std::vector<std::int32_t> tree_rows(const TreeRowsBatch& batch) {
  const Stream s;
  Device<std::int32_t> upload(view(batch.upload), s);
  Device<int> trees_at(view(batch.trees_at), s), tokens(view(batch.node_tokens), s), parents(view(batch.node_parents), s);
  launch_tree_rows(TreeRowsArgs{static_cast<int>(batch.trees_at.size() / 2), batch.budget, batch.window, trees_at.ptr,
                                tokens.ptr, parents.ptr, reinterpret_cast<RowDesc*>(upload.ptr + batch.layout.rows),
                                upload.ptr + batch.layout.mask},
                   s.s);
  return upload.get();
}

}  // namespace specula::cuda::harness
