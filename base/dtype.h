// defines: DType (the element types of weights, activations and KV pages: F32, F16, BF16, and
// I8, int8 with scales kept beside it, a format the CPU quantises matrices to at load), their
// sizes and names, the one parser of stored dtype names (safetensors' "BF16", the CLI's and
// configs' "bf16"), and store_value, the f32 -> dtype rounding every writer uses.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace specula {

enum class DType { F32, F16, BF16, I8 };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "F32", "F16", "BF16", "I8" (safetensors' spelling)

// F32 / F16 / BF16 in any letter case; nullopt for anything else, I8 included (no checkpoint
// stores it: callers that accept it spell it themselves; callers name the flag, key or tensor
// in their error).
std::optional<DType> parse_dtype(std::string_view name);

// Writes finite v at out in `dtype` (dtype_size bytes): F32 as is, F16 and BF16 rounded to
// nearest, ties to even. Not for I8 (it needs a scale): an internal error.
void store_value(float v, DType dtype, unsigned char* out);

}  // namespace specula
