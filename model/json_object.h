// defines: parse_json_object and read_json_object, a JSON document's top-level object with
// every error naming where it came from (the configs of models and draft heads).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace specula {

// The object `json_text` holds. Throws SpeculaError naming `origin` when the text is not JSON
// or not an object.
nlohmann::json parse_json_object(const std::string& json_text, const std::string& origin);

// The object in the file at `path`; errors as parse_json_object's, and when the file cannot be
// read.
nlohmann::json read_json_object(const std::string& path);

}  // namespace specula
