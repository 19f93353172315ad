// defines: DType (the element types of weights, activations and KV pages: F32, F16, BF16; the
// formats a model's matrices can be read in, product formats included, are engine/matrix_format.h's),
// their sizes and names, the one parser of stored dtype names (safetensors' "BF16", the CLI's
// and configs' "bf16"), and store_value, the f32 -> dtype rounding every writer uses.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace specula {

enum class DType { F32, F16, BF16 };

std::size_t dtype_size(DType t);
// "F32", "F16", "BF16" (safetensors' spelling).
const char* dtype_name(DType t);

// F32 / F16 / BF16 in any letter case; nullopt for anything else (callers name the flag, key
// or tensor in their error).
std::optional<DType> parse_dtype(std::string_view name);

// Writes finite v at out in `dtype` (dtype_size bytes): F32 as is, F16 and BF16 rounded to
// nearest, ties to even.
void store_value(float v, DType dtype, unsigned char* out);

}  // namespace specula
