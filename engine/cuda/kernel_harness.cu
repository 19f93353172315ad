// The test harness of the kernels (kernel_harness.h): host inputs up, NaN-poisoned outputs,
// one launch on a stream of its own, outputs back.
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernel_harness.h"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda::harness {
namespace {

// A device array of T, freed on scope exit.
template <class T>
struct Device {
  T* ptr = nullptr;
  std::size_t count = 0;
  explicit Device(std::size_t n) : count(n) { CUDA_CHECK(cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(T))); }
  Device(std::span<const T> host) : Device(host.size()) {
    CUDA_CHECK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(ptr); }
  std::vector<T> get() const {
    std::vector<T> out(count);
    CUDA_CHECK(cudaMemcpy(out.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  void poison() {  // all-ones bytes: NaN as f32 (and -1 as int)
    CUDA_CHECK(cudaMemset(ptr, 0xff, count * sizeof(T)));
  }
};

template <class T>
std::span<const T> view(const std::vector<T>& v) {
  return std::span<const T>(v.data(), v.size());
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(s)); }
};

// The pages of a host PageStorage on the device in `dtype` (layers back to back).
struct DevicePagesCopy {
  Device<unsigned char> bytes;
  DevicePagesView view;
  DevicePagesCopy(const PageStorage& pages, DType dtype)
      : bytes(static_cast<std::size_t>(pages.layout().num_layers) * pages.num_blocks() * pages.block_stride() *
              dtype_size(dtype)) {
    const KvLayout& l = pages.layout();
    view = DevicePagesView{bytes.ptr, pages.num_blocks() * pages.block_stride(), l.block_size, l.kv_dim(), l.num_layers,
                           dtype};
    std::vector<unsigned char> host(bytes.count);
    const std::size_t per_layer = view.layer_stride;
    for (int layer = 0; layer < l.num_layers; ++layer)
      for (std::size_t i = 0; i < per_layer; ++i)
        store_value(pages.layer(layer)[i], dtype, host.data() + (layer * per_layer + i) * dtype_size(dtype));
    CUDA_CHECK(cudaMemcpy(bytes.ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
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
  Device<unsigned char> t(std::span(static_cast<const unsigned char*>(table.data),
                                    static_cast<std::size_t>(table.numel()) * dtype_size(table.dtype)));
  Device<RowDesc> r(view(rows));
  Device<float> out(static_cast<std::size_t>(n) * hidden);
  out.poison();
  Stream s;
  launch_embed(t.ptr, table.dtype, r.ptr, out.ptr, n, hidden, s.s);
  s.sync();
  return out.get();
}

std::vector<float> rms_norm(std::span<const float> x, std::span<const float> weight, float eps, int n, int dim) {
  Device<float> dx(x), dw(weight), out(x.size());
  out.poison();
  Stream s;
  launch_rms_norm(dx.ptr, nullptr, dw.ptr, eps, out.ptr, n, dim, s.s);
  s.sync();
  return out.get();
}

std::vector<float> silu_mul(std::span<const float> gate_up, int n, int ffn) {
  Device<float> gu(gate_up), out(static_cast<std::size_t>(n) * ffn);
  out.poison();
  Stream s;
  launch_silu_mul(gu.ptr, out.ptr, n, ffn, s.s);
  s.sync();
  return out.get();
}

std::vector<float> matmul(std::span<const float> x, std::span<const std::uint16_t> w, std::span<const float> bias,
                          std::span<const float> y_in, int n, int in, int out, bool accumulate, MatmulPath path) {
  Device<float> dx(x), db(bias), dy(static_cast<std::size_t>(n) * out);
  Device<std::uint16_t> dw(w);
  if (accumulate)
    CUDA_CHECK(cudaMemcpy(dy.ptr, y_in.data(), y_in.size() * sizeof(float), cudaMemcpyHostToDevice));
  else
    dy.poison();
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(dw.ptr);
  const float* bp = bias.empty() ? nullptr : db.ptr;
  Stream s;
  if (path == MatmulPath::kSmall) {
    launch_matmul_small(dx.ptr, wb, bp, dy.ptr, n, in, out, accumulate, s.s);
  } else {
    cublasLtHandle_t handle = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    Device<unsigned char> ws(kCublasWorkspace);
    Device<__nv_bfloat16> xb(x.size());
    Device<float> tmp(static_cast<std::size_t>(n) * out);
    launch_linear(dx.ptr, wb, bp, dy.ptr, n, in, out, accumulate, GemmScratch{handle, ws.ptr, xb.ptr, tmp.ptr}, s.s);
    s.sync();
    cublasLtDestroy(handle);
  }
  s.sync();
  return dy.get();
}

std::vector<float> qk_rope_store(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, DType page_dtype,
                                 int layer, std::span<const float> qkv, std::span<const float> inv_freq,
                                 std::span<const float> q_norm, std::span<const float> k_norm, float eps, int num_heads) {
  const KvLayout& l = pages.layout();
  const StepUpload up = pack_step(batch, plan, 0, CudaOptions{}, 1);
  Device<std::int32_t> upload(view(up.data));
  Device<float> dqkv(qkv), freq(inv_freq), qn(q_norm), kn(k_norm);
  DevicePagesCopy dp(pages, page_dtype);
  Stream s;
  launch_qk_rope_store(dqkv.ptr, reinterpret_cast<const RowDesc*>(upload.ptr + up.layout.rows), freq.ptr,
                       q_norm.empty() ? nullptr : qn.ptr, k_norm.empty() ? nullptr : kn.ptr, eps, batch.num_rows(),
                       num_heads, l.num_kv_heads, l.head_dim, dp.view, layer, s.s);
  s.sync();
  dp.download(pages);
  return dqkv.get();
}

std::vector<float> attention(const RaggedBatch& batch, const KvPlan& plan, const PageStorage& pages, DType page_dtype,
                             int layer, int num_heads, int window, std::span<const float> q) {
  const KvLayout& l = pages.layout();
  const StepUpload up = pack_step(batch, plan, window, CudaOptions{}, 1);
  Device<std::int32_t> upload(view(up.data));
  Device<float> dq(q), out(q.size());
  out.poison();
  DevicePagesCopy dp(pages, page_dtype);
  Stream s;
  launch_attention(dq.ptr, num_heads * l.head_dim, reinterpret_cast<const RowDesc*>(upload.ptr + up.layout.rows),
                   upload.ptr + up.layout.pages, upload.ptr + up.layout.mask, batch.num_rows(), num_heads,
                   l.num_kv_heads, l.head_dim, up.key.keys_cap, dp.view, layer, out.ptr, s.s);
  s.sync();
  return out.get();
}

void kv_copies(std::span<const KvCopy> copies, PageStorage& pages, DType page_dtype) {
  const std::vector<std::int32_t> packed = pack_copies(copies);
  Device<std::int32_t> dc(view(packed));
  DevicePagesCopy dp(pages, page_dtype);
  Stream s;
  launch_kv_copies(dc.ptr, static_cast<int>(copies.size()), dp.view, s.s);
  s.sync();
  dp.download(pages);
}

}  // namespace specula::cuda::harness
