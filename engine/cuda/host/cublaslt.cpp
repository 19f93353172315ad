// The host execution's cuBLASLt (cublaslt.h): descriptors as plain structs, the product as one
// task on the stream.
#include "engine/cuda/host/cublaslt.h"

#include <cstring>
#include <vector>

namespace specula::cuda::host {

struct LtHandle {};
struct MatmulDesc {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct MatrixLayout {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
struct MatmulPreference {
  std::size_t max_workspace = 0;
};

namespace {

float load(const void* base, cudaDataType_t type, std::size_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}

bool supported(const MatrixLayout& l) {
  return (l.type == CUDA_R_32F || l.type == CUDA_R_16BF) && l.ld >= static_cast<std::int64_t>(l.rows);
}

}  // namespace
}  // namespace specula::cuda::host

using namespace specula::cuda::host;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new LtHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new MatmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, std::size_t bytes) {
  if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t op;
  std::memcpy(&op, buf, bytes);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) desc->transa = op;
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) desc->transb = op;
  else return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, std::uint64_t rows,
                                          std::uint64_t cols, std::int64_t ld) {
  *layout = new MatrixLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new MatmulPreference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    std::size_t bytes) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || bytes != sizeof(std::size_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&pref->max_workspace, buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned) {
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(*a) || !supported(*b) || c->type != CUDA_R_32F || d->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t*, void*, std::size_t,
                              cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const MatrixLayout A = *a_layout, B = *b_layout, C = *c_layout, D = *d_layout;
  const bool ta = desc->transa == CUBLAS_OP_T, tb = desc->transb == CUBLAS_OP_T;
  const std::uint64_t m = ta ? A.cols : A.rows, k = ta ? A.rows : A.cols;
  const std::uint64_t kb = tb ? B.cols : B.rows, n = tb ? B.rows : B.cols;
  if (k != kb || D.rows != m || D.cols != n || C.rows != m || C.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(A) || !supported(B) || C.type != CUDA_R_32F || D.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  float al, be;
  std::memcpy(&al, alpha, 4);
  std::memcpy(&be, beta, 4);
  enqueue(stream, "cublasLtMatmul", [=] {
    // op(A) as rows [m][k] and op(B) as columns [n][k] in f32, then each output's dot product.
    std::vector<float> rows(m * k), cols(n * k);
    for (std::uint64_t i = 0; i < m; ++i)
      for (std::uint64_t p = 0; p < k; ++p) rows[i * k + p] = load(a, A.type, ta ? p + i * A.ld : i + p * A.ld);
    for (std::uint64_t j = 0; j < n; ++j)
      for (std::uint64_t p = 0; p < k; ++p) cols[j * k + p] = load(b, B.type, tb ? j + p * B.ld : p + j * B.ld);
    auto* out = static_cast<float*>(d);
    for (std::uint64_t j = 0; j < n; ++j)
      for (std::uint64_t i = 0; i < m; ++i) {
        const float* x = &rows[i * k];
        const float* y = &cols[j * k];
        // Eight partial sums over k = p mod 8, added in order at the end.
        float part[8] = {};
        std::uint64_t p = 0;
        for (; p + 8 <= k; p += 8)
          for (int q = 0; q < 8; ++q) part[q] = fmaf(x[p + q], y[p + q], part[q]);
        for (; p < k; ++p) part[p % 8] = fmaf(x[p], y[p], part[p % 8]);
        float acc = 0.0f;
        for (float partial : part) acc += partial;
        float v = al * acc;
        if (be != 0.0f) v += be * static_cast<const float*>(c)[i + j * C.ld];  // beta 0: C is not read
        out[i + j * D.ld] = v;
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
