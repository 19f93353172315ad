#include "base/dtype.h"

#include <immintrin.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

namespace specula {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string upper(name);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    if (upper == dtype_name(t)) return t;
  return std::nullopt;
}

void store_value(float v, DType dtype, unsigned char* out) {
  if (dtype == DType::F32) {
    std::memcpy(out, &v, 4);
  } else if (dtype == DType::F16) {
    const uint16_t h = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(out, &h, 2);
  } else {  // BF16
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const uint16_t b = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    std::memcpy(out, &b, 2);
  }
}

}  // namespace specula
