// defines: WeightMatrix, one checkpoint matrix as the CPU backend holds it: packed in a float
// dtype for the process's instruction set (packed_weights.h, matmul.h), quantised to int8
// with per-block scales (packed_int8.h, matmul_int8.h) or packed in BF16 for the bf16dot
// product (matmul_bf16dot.h) or the bf16amx product (matmul_bf16amx.h), and its product.
#pragma once

#include <cstddef>
#include <optional>
#include <variant>

#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16amx.h"
#include "engine/cpu/matmul_bf16dot.h"
#include "engine/cpu/matmul_int8.h"
#include "engine/matrix_format.h"

namespace specula::cpu {

class WeightMatrix {
 public:
  // w ([out, in]) as stored, converted to `as` (f32, f16, bf16), quantised (int8, on the int8
  // kernel `isa` allows: int8_kernel), or in BF16 with subnormals flushed (bf16dot, on the
  // bf16dot kernel `isa` allows: bf16dot_kernel; bf16amx, for AMX's tiles, which the caller
  // has checked this process can run: bf16amx_unsupported).
  WeightMatrix(const TensorView& w, MatmulIsa isa, std::optional<MatrixFormat> as);

  // The bytes one product reads (int8: the values and their scales).
  std::size_t bytes() const;

  // y[n, out] = x[n, in] * W^T.  x: in [n, in] f32; y: out [n, out] f32
  void product(const float* x, float* y, int n) const;

 private:
  std::optional<MatrixFormat> format_;  // nullopt: as stored
  std::variant<PackedWeights, PackedInt8> packed_;
  Int8Kernel int8_kernel_;
  Bf16DotKernel bf16dot_kernel_;
};

}  // namespace specula::cpu
