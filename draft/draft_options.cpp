#include "draft/draft_options.h"

#include <cctype>

namespace specula {

std::string weights_name(std::optional<DType> weights) {
  if (!weights) return "stored";
  if (*weights == DType::I8) return "int8";
  if (*weights == DType::BF16Dot) return "bf16dot";
  if (*weights == DType::BF16Amx) return "bf16amx";
  std::string name = dtype_name(*weights);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

bool parse_weights(std::string_view text, std::optional<DType>& weights) {
  if (text == "stored") {
    weights.reset();
    return true;
  }
  for (DType format : {DType::I8, DType::BF16Dot, DType::BF16Amx})
    if (text == weights_name(format)) {
      weights = format;
      return true;
    }
  const std::optional<DType> dtype = parse_dtype(text);
  if (dtype) weights = dtype;
  return dtype.has_value();
}

}  // namespace specula
