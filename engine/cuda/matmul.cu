// The matrix products of the CUDA backend: a batch-invariant kernel of our own for every row
// count, cuBLASLt (bf16 in, f32 accumulate) for chunks of more than kSmallRows rows where the
// non-invariant setting asks for it, the shared bias / residual epilogue; then the launchers.
#include <algorithm>
#include <memory>
#include <type_traits>

#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

constexpr int kMatmulWarps = 4;  // outputs per block (a warp each)

// ---- kernels ----

// Equals cpu::matmul (+ add_bias, + add_inplace when accumulate) for rows
// [blockIdx.y * R, + R): a warp per output o; lane l reduces k = 8 (l + 32 t) .. + 7 for t = 0, 1,
// ... in that order (fmaf), then the warp's butterfly; so every element's reduction order is
// fixed by `in` alone, whatever n or R (batch invariance). The result: y = acc + bias, or
// y = y + (acc + bias).
template <int R>
__global__ void matmul_small_kernel(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int n, int in,
                                    int out, bool accumulate) {
  const int o = blockIdx.x * kMatmulWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.y * R;
  if (o >= out) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const __nv_bfloat16* wo = w + static_cast<std::size_t>(o) * in;
  for (int k = lane * kMatmulKStep; k < in; k += 32 * kMatmulKStep) {
    // Eight bf16 weights in one 16-byte load, widened from the words' halves (a bf16 is the
    // high half of an f32); no object is read through a pointer of another type.
    const uint4 packed = *reinterpret_cast<const uint4*>(wo + k);
    const unsigned int words[kMatmulKStep / 2] = {packed.x, packed.y, packed.z, packed.w};
    float wk[kMatmulKStep];
#pragma unroll
    for (int i = 0; i < kMatmulKStep / 2; ++i) {
      wk[2 * i] = __uint_as_float(words[i] << 16);
      wk[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row0 + r >= n) break;
      const float4* xr = reinterpret_cast<const float4*>(x + static_cast<std::size_t>(row0 + r) * in + k);
      const float4 a = xr[0], b = xr[1];
      float s = acc[r];
      s = fmaf(a.x, wk[0], s);
      s = fmaf(a.y, wk[1], s);
      s = fmaf(a.z, wk[2], s);
      s = fmaf(a.w, wk[3], s);
      s = fmaf(b.x, wk[4], s);
      s = fmaf(b.y, wk[5], s);
      s = fmaf(b.z, wk[6], s);
      s = fmaf(b.w, wk[7], s);
      acc[r] = s;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float total = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < n) {
      float v = total + (bias ? bias[o] : 0.0f);
      float* dst = y + static_cast<std::size_t>(row0 + r) * out + o;
      *dst = accumulate ? *dst + v : v;
    }
  }
}

// The f32 -> bf16 rounding of cuBLASLt's input (round to nearest even, as store_value).
__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, std::size_t count) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// The epilogue of a cuBLASLt product, as matmul_small_kernel's: y = t + bias, or y += t + bias.
__global__ void epilogue_kernel(const float* t, const float* bias, float* y, int out, std::size_t count, bool accumulate) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = t[i] + (bias ? bias[i % out] : 0.0f);
    y[i] = accumulate ? y[i] + v : v;
  }
}

int grid_for(std::size_t count) { return static_cast<int>(std::min<std::size_t>((count + 255) / 256, 4096)); }

}  // namespace

// The descriptors of D [out, n] (column-major, i.e. row-major [n, out]) = W^T-as-stored
// [in, out]^T x [in, n] and the heuristic's algorithm; each made descriptor is destroyed with
// the plan, also when a later step of making it throws.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  GemmPlan(cublasLtHandle_t handle, int n, int in, int out) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, in, out, in));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, in, n, in));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, out, n, out));
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
        pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
    const std::size_t ws = kCublasWorkspace;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, d, d, pref, 1, &result, &found));
    SPECULA_CHECK(found > 0, "backend 'cuda': cuBLASLt has no algorithm for a [", n, " x ", in, "] x [", in, " x ", out,
                  "] bf16 product");
    algo = result.algo;
  }
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

GemmPlans::GemmPlans() = default;
GemmPlans::~GemmPlans() = default;

namespace {

void cublaslt_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int n, int in, int out,
                   const GemmScratch& s, cudaStream_t stream) {
  SPECULA_CHECK(s.plans != nullptr, "launch_linear: cuBLASLt products need the workspace's plans");
  std::unique_ptr<GemmPlan>& plan = s.plans->by_shape[{n, in, out}];
  if (!plan) plan = std::make_unique<GemmPlan>(s.handle, n, in, out);
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(s.handle, plan->op, &one, w, plan->a, x, plan->b, &zero, y, plan->d, y, plan->d,
                              &plan->algo, s.workspace, kCublasWorkspace, stream));
}

}  // namespace

// ---- launchers ----

void launch_matmul_small(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int n, int in, int out,
                         bool accumulate, cudaStream_t stream) {
  const int blocks_x = (out + kMatmulWarps - 1) / kMatmulWarps;
  const int threads = 32 * kMatmulWarps;
  // Rows per block: the smallest of 1, 2, 4, 8 covering n (at most 8; more rows take more blocks).
  if (n == 1) {
    SPECULA_LAUNCH(matmul_small_kernel<1>, dim3(blocks_x, 1), threads, 0, stream, x, w, bias, y, n, in, out, accumulate);
  } else if (n == 2) {
    SPECULA_LAUNCH(matmul_small_kernel<2>, dim3(blocks_x, 1), threads, 0, stream, x, w, bias, y, n, in, out, accumulate);
  } else if (n <= 4) {
    SPECULA_LAUNCH(matmul_small_kernel<4>, dim3(blocks_x, 1), threads, 0, stream, x, w, bias, y, n, in, out, accumulate);
  } else {
    SPECULA_LAUNCH(matmul_small_kernel<8>, dim3(blocks_x, (n + 7) / 8), threads, 0, stream, x, w, bias, y, n, in, out,
                   accumulate);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_linear(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int n, int in, int out,
                   bool accumulate, const GemmScratch& scratch, cudaStream_t stream) {
  if (n <= kSmallRows || !scratch.cublas_prefill) {
    launch_matmul_small(x, w, bias, y, n, in, out, accumulate, stream);
    return;
  }
  const std::size_t in_count = static_cast<std::size_t>(n) * in, out_count = static_cast<std::size_t>(n) * out;
  SPECULA_LAUNCH(to_bf16_kernel, grid_for(in_count), 256, 0, stream, x, scratch.x_bf16, in_count);
  CUDA_CHECK_LAUNCH();
  const bool epilogue = bias != nullptr || accumulate;
  cublaslt_gemm(scratch.x_bf16, w, epilogue ? scratch.tmp : y, n, in, out, scratch, stream);
  if (epilogue) {
    SPECULA_LAUNCH(epilogue_kernel, grid_for(out_count), 256, 0, stream, scratch.tmp, bias, y, out, out_count, accumulate);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace specula::cuda
