// defines: DType (the element types of weights, activations and KV pages: F32, F16, BF16; and
// three CPU product formats a model's matrices can be read in, never stored dtypes: I8, int8
// with scales kept beside it, quantised at load (engine/cpu/packed_int8.h), BF16Dot, the
// weights in BF16 multiplied by activations rounded to BF16 with f32 accumulation
// (engine/cpu/matmul_bf16dot.h), and BF16Amx, the same operands multiplied by AMX's tile
// instruction (engine/cpu/matmul_bf16amx.h)), their sizes and names, the one parser of stored dtype names (safetensors' "BF16", the CLI's and
// configs' "bf16"), and store_value, the f32 -> dtype rounding every writer uses.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace specula {

enum class DType { F32, F16, BF16, I8, BF16Dot, BF16Amx };

std::size_t dtype_size(DType t);
// "F32", "F16", "BF16", "I8" (safetensors' spelling), "BF16DOT", "BF16AMX".
const char* dtype_name(DType t);

// F32 / F16 / BF16 in any letter case; nullopt for anything else, I8, BF16Dot and BF16Amx included (no
// checkpoint stores them: callers that accept them spell them themselves; callers name the
// flag, key or tensor in their error).
std::optional<DType> parse_dtype(std::string_view name);

// Writes finite v at out in `dtype` (dtype_size bytes): F32 as is, F16 and BF16 rounded to
// nearest, ties to even. Not for I8 (it needs a scale) or BF16Dot (a product format): an
// internal error.
void store_value(float v, DType dtype, unsigned char* out);

}  // namespace specula
