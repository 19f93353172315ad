// The row-wise and elementwise kernels of the CUDA module (embedding, RMSNorm, q/k norm + RoPE
// + KV store, SiLU-gate, row copies, Medusa's SiLU residual, the KV copy list), then their
// launchers. Every reduction runs within one row with a fixed thread count and order, so a
// row's result never depends on the batch.
#include <algorithm>

#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

constexpr int kRowThreads = 256;

// ---- kernels ----

// Equals cpu::weight_row(model.embed_tokens(), token): the stored element widened to f32.
template <class T>
__global__ void embed_kernel(const T* table, const RowDesc* rows, float* x, int hidden) {
  const int r = blockIdx.x;
  const T* src = table + static_cast<std::size_t>(rows[r].token) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[static_cast<std::size_t>(r) * hidden + i] = to_f32(src[i]);
}

// Equals cpu::rms_norm: y = weight * (x * (1 / sqrt(mean(x^2) + eps))), the sum over the row in
// the block's fixed order.
__global__ void rms_norm_kernel(const float* x, const int* gather, const float* weight, float eps, float* y, int dim) {
  __shared__ float partial[kRowThreads / 32];
  const int r = blockIdx.x;
  const float* xr = x + static_cast<std::size_t>(gather ? gather[r] : r) * dim;
  float* yr = y + static_cast<std::size_t>(r) * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum = fmaf(xr[i], xr[i], sum);
  sum = block_sum<kRowThreads>(sum, partial);
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = weight[i] * (xr[i] * inv);
}

template <class T>
__device__ void store_kv(T* dst, float v);
template <>
__device__ void store_kv<float>(float* dst, float v) { *dst = v; }
template <>
__device__ void store_kv<__nv_bfloat16>(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16_rn(v); }

// One warp per head of a row (q heads, then k heads): Qwen3's per-head RMSNorm (cpu::rms_norm
// over head_dim), then RoPE as cpu::RopeTable::apply (angle = position * inv_freq[i] in f32,
// the rotate_half pairs (i, i + half)); q in place, k and v to the row's slot of the pages.
template <class T>
__global__ void qk_rope_store_kernel(float* qkv, const RowDesc* rows, const float* inv_freq, const float* q_norm,
                                     const float* k_norm, float eps, int num_heads, int num_kv_heads, int head_dim,
                                     T* layer_pages, int block_size, int kv_dim) {
  const int r = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int q_dim = num_heads * head_dim;
  const int width = q_dim + 2 * kv_dim;
  float* row = qkv + static_cast<std::size_t>(r) * width;
  const RowDesc d = rows[r];
  const std::size_t block_stride = 2 * static_cast<std::size_t>(block_size) * kv_dim;
  T* key_dst = layer_pages + static_cast<std::size_t>(d.slot / block_size) * block_stride +
               static_cast<std::size_t>(d.slot % block_size) * kv_dim;
  T* value_dst = key_dst + static_cast<std::size_t>(block_size) * kv_dim;
  const int half = head_dim / 2;
  const float position = static_cast<float>(d.position);
  for (int h = warp; h < num_heads + num_kv_heads; h += warps) {
    const bool is_key = h >= num_heads;
    float* x = row + (is_key ? q_dim + (h - num_heads) * head_dim : h * head_dim);
    const float* norm = is_key ? k_norm : q_norm;
    float inv = 1.0f;
    if (norm) {
      float sum = 0.0f;
      for (int i = lane; i < head_dim; i += 32) sum = fmaf(x[i], x[i], sum);
      inv = 1.0f / sqrtf(warp_sum(sum) / static_cast<float>(head_dim) + eps);
    }
    for (int i = lane; i < half; i += 32) {
      float a = x[i], b = x[i + half];
      if (norm) a = norm[i] * (a * inv), b = norm[i + half] * (b * inv);
      const float angle = position * inv_freq[i];
      const float c = cosf(angle), s = sinf(angle);
      const float ra = a * c - b * s, rb = b * c + a * s;
      if (is_key) {
        const int at = (h - num_heads) * head_dim;
        store_kv(key_dst + at + i, ra);
        store_kv(key_dst + at + i + half, rb);
      } else {
        x[i] = ra;
        x[i + half] = rb;
      }
    }
  }
  const float* v = row + q_dim + kv_dim;
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) store_kv(value_dst + i, v[i]);
}

// Equals cpu::silu_mul: silu(g) * u = g / (1 + e^-g) * u.
__global__ void silu_mul_kernel(const float* gu, float* act, int ffn) {
  const int r = blockIdx.y;
  const float* g = gu + static_cast<std::size_t>(r) * 2 * ffn;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ffn; i += gridDim.x * blockDim.x)
    act[static_cast<std::size_t>(r) * ffn + i] = g[i] / (1.0f + expf(-g[i])) * g[ffn + i];
}

__global__ void gather_tokens_kernel(const int* drawn, const int* index, int* dst, int dst_stride, int n,
                                     bool keep_negative) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || index[i] < 0) return;
  const int token = drawn[index[i]];
  dst[static_cast<std::size_t>(i) * dst_stride] = token < 0 && !keep_negative ? 0 : token;
}

// dst row r = src row (gather ? gather[r] : r), left where gather[r] < 0; each row `dim`
// floats, rows `src_stride` and `dst_stride` floats apart.
__global__ void copy_rows_kernel(const float* src, int src_stride, const int* gather, float* dst, int dst_stride,
                                 int dim) {
  const int r = blockIdx.y;
  if (gather && gather[r] < 0) return;
  const float* s = src + static_cast<std::size_t>(gather ? gather[r] : r) * src_stride;
  float* d = dst + static_cast<std::size_t>(r) * dst_stride;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x) d[i] = s[i];
}

// Row r of dst filled with `fill`, then (spread_columns_kernel, launched after) src's entries
// laid at their columns.
__global__ void fill_rows_kernel(float* dst, int dim, float fill) {
  float* d = dst + static_cast<std::size_t>(blockIdx.y) * dim;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x) d[i] = fill;
}

__global__ void spread_columns_kernel(const float* src, int src_dim, const int* columns, float* dst, int dst_dim) {
  const float* s = src + static_cast<std::size_t>(blockIdx.y) * src_dim;
  float* d = dst + static_cast<std::size_t>(blockIdx.y) * dst_dim;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < src_dim; j += gridDim.x * blockDim.x) d[columns[j]] = s[j];
}

// x += silu(z) = z / (1 + e^-z), elementwise (Medusa's residual block, medusa_cpu.cpp).
__global__ void add_silu_kernel(const float* z, float* x, std::size_t count) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] += z[i] / (1.0f + expf(-z[i]));
}

// Equals PageStorage::execute: copies in list order (a later one may read an earlier one's
// writes: the block's barrier between copies), one block per layer.
template <class T>
__global__ void kv_copies_kernel(const std::int32_t* copies, int num_copies, T* pages0, std::size_t layer_stride,
                                 int block_size, int kv_dim) {
  T* layer = pages0 + blockIdx.x * layer_stride;
  const std::size_t value_offset = static_cast<std::size_t>(block_size) * kv_dim;
  const std::size_t block_stride = 2 * value_offset;
  for (int c = 0; c < num_copies; ++c) {
    const int kind = copies[3 * c], src = copies[3 * c + 1], dst = copies[3 * c + 2];
    if (kind == 0) {
      const T* s = layer + static_cast<std::size_t>(src) * block_stride;
      T* t = layer + static_cast<std::size_t>(dst) * block_stride;
      for (std::size_t i = threadIdx.x; i < block_stride; i += blockDim.x) t[i] = s[i];
    } else {
      const auto at = [&](int slot) {
        return static_cast<std::size_t>(slot / block_size) * block_stride + static_cast<std::size_t>(slot % block_size) * kv_dim;
      };
      for (int kv = 0; kv < 2; ++kv)
        for (int i = threadIdx.x; i < kv_dim; i += blockDim.x)
          layer[at(dst) + kv * value_offset + i] = layer[at(src) + kv * value_offset + i];
    }
    __syncthreads();
  }
}

}  // namespace

// ---- launchers ----

void launch_embed(const void* table, DType dtype, const RowDesc* rows, float* x, int n, int hidden, cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: SPECULA_LAUNCH(embed_kernel<float>, n, kRowThreads, 0, stream, static_cast<const float*>(table), rows, x, hidden); break;
    case DType::F16: SPECULA_LAUNCH(embed_kernel<__half>, n, kRowThreads, 0, stream, static_cast<const __half*>(table), rows, x, hidden); break;
    case DType::BF16:
      SPECULA_LAUNCH(embed_kernel<__nv_bfloat16>, n, kRowThreads, 0, stream, static_cast<const __nv_bfloat16*>(table),
                     rows, x, hidden);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void launch_rms_norm(const float* x, const int* gather, const float* weight, float eps, float* y, int n, int dim,
                     cudaStream_t stream) {
  SPECULA_LAUNCH(rms_norm_kernel, n, kRowThreads, 0, stream, x, gather, weight, eps, y, dim);
  CUDA_CHECK_LAUNCH();
}

void launch_qk_rope_store(float* qkv, const RowDesc* rows, const float* inv_freq, const float* q_norm,
                          const float* k_norm, float eps, int n, int num_heads, int num_kv_heads, int head_dim,
                          const DevicePagesView& pages, int layer, cudaStream_t stream) {
  if (pages.dtype == DType::BF16) {
    auto* p = static_cast<__nv_bfloat16*>(pages.layer0) + static_cast<std::size_t>(layer) * pages.layer_stride;
    SPECULA_LAUNCH(qk_rope_store_kernel<__nv_bfloat16>, n, kRowThreads, 0, stream, qkv, rows, inv_freq, q_norm, k_norm,
                   eps, num_heads, num_kv_heads, head_dim, p, pages.block_size, pages.kv_dim);
  } else {
    auto* p = static_cast<float*>(pages.layer0) + static_cast<std::size_t>(layer) * pages.layer_stride;
    SPECULA_LAUNCH(qk_rope_store_kernel<float>, n, kRowThreads, 0, stream, qkv, rows, inv_freq, q_norm, k_norm, eps,
                   num_heads, num_kv_heads, head_dim, p, pages.block_size, pages.kv_dim);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const float* gu, float* act, int n, int ffn, cudaStream_t stream) {
  const dim3 grid((ffn + kRowThreads - 1) / kRowThreads, n);
  SPECULA_LAUNCH(silu_mul_kernel, grid, kRowThreads, 0, stream, gu, act, ffn);
  CUDA_CHECK_LAUNCH();
}

void launch_copy_rows(const float* src, int src_stride, const int* gather, float* dst, int dst_stride, int n, int dim,
                      cudaStream_t stream) {
  if (n == 0) return;
  const dim3 grid((dim + kRowThreads - 1) / kRowThreads, n);
  SPECULA_LAUNCH(copy_rows_kernel, grid, kRowThreads, 0, stream, src, src_stride, gather, dst, dst_stride, dim);
  CUDA_CHECK_LAUNCH();
}

void launch_spread_columns(const float* src, int src_dim, const int* columns, float fill, float* dst, int dst_dim,
                           int n, cudaStream_t stream) {
  if (n == 0) return;
  SPECULA_LAUNCH(fill_rows_kernel, dim3((dst_dim + kRowThreads - 1) / kRowThreads, n), kRowThreads, 0, stream, dst,
                 dst_dim, fill);
  CUDA_CHECK_LAUNCH();
  SPECULA_LAUNCH(spread_columns_kernel, dim3((src_dim + kRowThreads - 1) / kRowThreads, n), kRowThreads, 0, stream, src,
                 src_dim, columns, dst, dst_dim);
  CUDA_CHECK_LAUNCH();
}

void launch_gather_tokens(const int* drawn, const int* index, int* dst, int dst_stride, int n, bool keep_negative,
                          cudaStream_t stream) {
  if (n == 0) return;
  SPECULA_LAUNCH(gather_tokens_kernel, (n + kRowThreads - 1) / kRowThreads, kRowThreads, 0, stream, drawn, index, dst,
                 dst_stride, n, keep_negative);
  CUDA_CHECK_LAUNCH();
}

void launch_add_silu(const float* z, float* x, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  const std::size_t blocks = std::min<std::size_t>((count + kRowThreads - 1) / kRowThreads, 4096);
  SPECULA_LAUNCH(add_silu_kernel, static_cast<unsigned>(blocks), kRowThreads, 0, stream, z, x, count);
  CUDA_CHECK_LAUNCH();
}

void launch_kv_copies(const std::int32_t* copies, int num_copies, const DevicePagesView& pages, cudaStream_t stream) {
  if (num_copies == 0) return;
  if (pages.dtype == DType::BF16)
    SPECULA_LAUNCH(kv_copies_kernel<__nv_bfloat16>, pages.num_layers, kRowThreads, 0, stream, copies, num_copies,
                   static_cast<__nv_bfloat16*>(pages.layer0), pages.layer_stride, pages.block_size, pages.kv_dim);
  else
    SPECULA_LAUNCH(kv_copies_kernel<float>, pages.num_layers, kRowThreads, 0, stream, copies, num_copies,
                   static_cast<float*>(pages.layer0), pages.layer_stride, pages.block_size, pages.kv_dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specula::cuda
