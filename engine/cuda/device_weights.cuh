// defines: the weight uploads of the CUDA module's backends (the model's arena, and in
// head_cuda.cu and medusa_cuda.cu the heads' tensors): bytes as given, matrices stacked by rows and rounded to bf16 (the CUDA backend's matrix dtype), vectors in
// f32, an embedding table as stored (launch_embed reads F32, F16 and BF16). Each returns when
// its copy is done: a copy from pageable memory may still be in flight on the legacy stream
// when cudaMemcpy returns, and the workspaces' non-blocking streams do not wait for it.
#pragma once

#include <cstring>
#include <initializer_list>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "engine/cpu/matmul.h"
#include "engine/cuda/device_memory.cuh"
#include "model/safetensors.h"

namespace specula::cuda {

// `bytes` bytes at `data` in a new device buffer.
inline DeviceBuffer upload_bytes(const void* data, std::size_t bytes) {
  DeviceBuffer buffer(bytes);
  CUDA_CHECK(cudaMemcpy(buffer.ptr, data, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
  return buffer;
}

// The matrices `parts` stacked by rows, [sum of rows, cols] in bf16. Every part has `cols`
// columns (checked, naming the tensor).
inline DeviceBuffer upload_bf16_rows(std::initializer_list<const TensorView*> parts, std::int64_t cols) {
  std::int64_t rows = 0;
  for (const TensorView* t : parts) {
    SPECULA_CHECK(t->shape.size() == 2 && t->shape[1] == cols, t->origin, ": '", t->name, "' is not [*, ", cols, "]");
    rows += t->shape[0];
  }
  std::vector<unsigned char> host(static_cast<std::size_t>(rows * cols) * 2);
  std::vector<float> row(static_cast<std::size_t>(cols));
  unsigned char* dst = host.data();
  for (const TensorView* t : parts)
    for (std::int64_t r = 0; r < t->shape[0]; ++r) {
      cpu::weight_row(*t, r, row.data());
      for (float v : row) {
        store_value(v, DType::BF16, dst);
        dst += 2;
      }
    }
  return upload_bytes(host.data(), host.size());
}

inline DeviceBuffer upload_f32(std::span<const float> values) { return upload_bytes(values.data(), values.size_bytes()); }

// The tensor's bytes as stored.
inline DeviceBuffer upload_as_stored(const TensorView& t) {
  return upload_bytes(t.data, static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
}

}  // namespace specula::cuda
