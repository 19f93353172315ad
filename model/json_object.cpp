#include "model/json_object.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace specula {

nlohmann::json parse_json_object(const std::string& json_text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number beyond a double
    throw SpeculaError(detail::concat(origin, ": invalid JSON: ", e.what()));
  }
  SPECULA_CHECK(j.is_object(), origin, ": expected a JSON object");
  return j;
}

nlohmann::json read_json_object(const std::string& path) {
  std::ifstream in(path);
  SPECULA_CHECK(in, path, ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return parse_json_object(text.str(), path);
}

}  // namespace specula
