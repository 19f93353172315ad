#include "draft/draft_options.h"

namespace specula {

std::string weights_name(std::optional<MatrixFormat> weights) { return weights ? name_of(*weights) : "stored"; }

bool parse_weights(std::string_view text, std::optional<MatrixFormat>& weights) {
  if (text == "stored") {
    weights.reset();
    return true;
  }
  if (const std::optional<MatrixFormat> format = parse_enum<MatrixFormat>(text)) {
    weights = format;
    return true;
  }
  const std::optional<DType> dtype = parse_dtype(text);
  if (dtype) weights = element_format(*dtype);
  return dtype.has_value();
}

std::vector<std::string> weights_spellings() {
  std::vector<std::string> out = {"stored"};
  for (const std::string& name : enum_spellings<MatrixFormat>()) out.push_back(name);
  return out;
}

std::string weights_choices() { return "stored, " + enum_choices<MatrixFormat>(); }

}  // namespace specula
