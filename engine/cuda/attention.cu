// Paged attention over the visibility of RaggedBatch (prefill chunks, decode rows and trees
// alike), then its launcher. One block per (row, query head); the keys are the row's entries
// in position order (RowDesc: the prefix through the page list, then its listed slots, a
// sliding window hiding the oldest), so a row's result depends only on its own keys.
#include <cmath>

#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

constexpr int kAttentionThreads = 128;
static_assert(kAttentionThreads / 32 <= kAttentionScratchFloats, "one reduction partial per warp");

// ---- kernel ----

// Equals cpu::attend_batch for one (row, head) (its reference: attend_batch_reference):
// scores = scale * q . k_j, softmax over j, out = sum_j p_j v_j. Dynamic shared memory
// (attention_smem_bytes): scores [keys_cap] f32, slots [keys_cap] int, q [head_dim] f32, the
// block reductions' partials [kAttentionScratchFloats] f32. No static shared memory: the
// dynamic limit prepare_attention sets is the device's whole opt-in limit.
template <class T>
__global__ void attention_kernel(const float* q, int q_stride, const RowDesc* rows, const int* pages_list,
                                 const int* mask, int num_heads, int num_kv_heads, int head_dim, int keys_cap,
                                 const T* layer_pages, int block_size, int kv_dim, float scale, float* out) {
  SPECULA_DYNAMIC_SHARED(float, smem);
  float* scores = smem;
  int* slots = reinterpret_cast<int*>(smem + keys_cap);
  float* qh = smem + 2 * static_cast<std::size_t>(keys_cap);
  float* partial = qh + head_dim;

  const int r = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const RowDesc d = rows[r];
  const int num_keys = d.prefix_len + d.num_extra - d.first;
  const int kv_offset = (h / (num_heads / num_kv_heads)) * head_dim;
  const std::size_t block_stride = 2 * static_cast<std::size_t>(block_size) * kv_dim;
  const std::size_t value_offset = static_cast<std::size_t>(block_size) * kv_dim;

  for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
    qh[i] = q[static_cast<std::size_t>(r) * q_stride + static_cast<std::size_t>(h) * head_dim + i];
  for (int j = threadIdx.x; j < num_keys; j += blockDim.x) {
    const int e = d.first + j;
    const int slot = e < d.prefix_len ? e : mask[d.extra_begin + e - d.prefix_len];
    slots[j] = pages_list[d.pages_begin + slot / block_size] * block_size + slot % block_size;  // physical slot
  }
  __syncthreads();

  // Scores: a warp per key, the lanes over head_dim, then the butterfly.
  for (int j = warp; j < num_keys; j += kAttentionThreads / 32) {
    const int slot = slots[j];
    const T* k = layer_pages + static_cast<std::size_t>(slot / block_size) * block_stride +
                 static_cast<std::size_t>(slot % block_size) * kv_dim + kv_offset;
    float dot = 0.0f;
    for (int i = lane; i < head_dim; i += 32) dot = fmaf(qh[i], to_f32(k[i]), dot);
    dot = warp_sum(dot);
    if (lane == 0) scores[j] = dot * scale;
  }
  __syncthreads();

  float m = -INFINITY;
  for (int j = threadIdx.x; j < num_keys; j += blockDim.x) m = fmaxf(m, scores[j]);
  m = block_max<kAttentionThreads>(m, partial);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < num_keys; j += blockDim.x) {
    const float p = expf(scores[j] - m);
    scores[j] = p;
    sum += p;
  }
  sum = block_sum<kAttentionThreads>(sum, partial);  // its barrier also publishes scores
  const float inv = 1.0f / sum;

  // The weighted sum: a thread per dimension, keys in order.
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < num_keys; ++j) {
      const int slot = slots[j];
      const T* v = layer_pages + static_cast<std::size_t>(slot / block_size) * block_stride + value_offset +
                   static_cast<std::size_t>(slot % block_size) * kv_dim + kv_offset;
      acc = fmaf(scores[j], to_f32(v[i]), acc);
    }
    out[static_cast<std::size_t>(r) * num_heads * head_dim + static_cast<std::size_t>(h) * head_dim + i] = acc * inv;
  }
}

template <class T>
void launch_typed(const float* q, int q_stride, const RowDesc* rows, const int* pages_list, const int* mask, int n,
                  int num_heads, int num_kv_heads, int head_dim, int keys_cap, const DevicePagesView& pages, int layer,
                  float* out, cudaStream_t stream) {
  const std::size_t smem = attention_smem_bytes(keys_cap, head_dim);
  const T* layer_pages = static_cast<const T*>(pages.layer0) + static_cast<std::size_t>(layer) * pages.layer_stride;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  SPECULA_LAUNCH(attention_kernel<T>, dim3(n, num_heads), kAttentionThreads, smem, stream, q, q_stride, rows, pages_list,
                 mask, num_heads, num_kv_heads, head_dim, keys_cap, layer_pages, pages.block_size, pages.kv_dim, scale, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- launchers ----

void prepare_attention(int max_shared_bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared_bytes));
  CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  max_shared_bytes));
}

void launch_attention(const float* q, int q_stride, const RowDesc* rows, const int* pages_list, const int* mask, int n,
                      int num_heads, int num_kv_heads, int head_dim, int keys_cap, const DevicePagesView& pages,
                      int layer, float* out, cudaStream_t stream) {
  if (pages.dtype == DType::BF16)
    launch_typed<__nv_bfloat16>(q, q_stride, rows, pages_list, mask, n, num_heads, num_kv_heads, head_dim, keys_cap,
                                pages, layer, out, stream);
  else
    launch_typed<float>(q, q_stride, rows, pages_list, mask, n, num_heads, num_kv_heads, head_dim, keys_cap, pages,
                        layer, out, stream);
}

}  // namespace specula::cuda
