// defines: MatrixFormat, the formats a model's matrices can be read in, converted at load
// whatever the checkpoint stores: a float element type (f32, f16, bf16; DType's), or one of the
// CPU's product formats, never stored: int8, quantised with per-block scales kept beside it
// (engine/cpu/packed_int8.h); bf16dot, BF16 weights multiplied by activations rounded to BF16
// with f32 accumulation (engine/cpu/matmul_bf16dot.h); bf16amx, the same operands multiplied by
// AMX's tile instruction (engine/cpu/matmul_bf16amx.h). Their spellings (--weights,
// --draft-weights, target.weights, draft.weights) and the element type <-> format mapping.
#pragma once

#include <optional>
#include <span>

#include "base/dtype.h"
#include "base/enum_names.h"

namespace specula {

enum class MatrixFormat { kF32, kF16, kBF16, kInt8, kBF16Dot, kBF16Amx };

inline std::span<const EnumName<MatrixFormat>> enum_names(MatrixFormat) {
  static constexpr EnumName<MatrixFormat> kNames[] = {
      {MatrixFormat::kF32, "f32"},    {MatrixFormat::kF16, "f16"},         {MatrixFormat::kBF16, "bf16"},
      {MatrixFormat::kInt8, "int8"}, {MatrixFormat::kBF16Dot, "bf16dot"}, {MatrixFormat::kBF16Amx, "bf16amx"}};
  return kNames;
}

// The format that reads matrices as element type `dtype`.
constexpr MatrixFormat element_format(DType dtype) {
  switch (dtype) {
    case DType::F32: return MatrixFormat::kF32;
    case DType::F16: return MatrixFormat::kF16;
    case DType::BF16: return MatrixFormat::kBF16;
  }
  return MatrixFormat::kF32;
}

// The element type a float format reads matrices as; nullopt for the product formats.
constexpr std::optional<DType> element_dtype(MatrixFormat format) {
  switch (format) {
    case MatrixFormat::kF32: return DType::F32;
    case MatrixFormat::kF16: return DType::F16;
    case MatrixFormat::kBF16: return DType::BF16;
    case MatrixFormat::kInt8:
    case MatrixFormat::kBF16Dot:
    case MatrixFormat::kBF16Amx: break;
  }
  return std::nullopt;
}

}  // namespace specula
