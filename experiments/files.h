// defines: the whole-file reads and writes of an experiment directory — read_text,
// read_json_if_any, write_text.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace specula {

// The bytes of `path`; throws SpeculaError naming the path when it cannot be read.
std::string read_text(const std::filesystem::path& path);

// The JSON document in `path`: null when the file is missing, a discarded value when it is
// not JSON; a caller checks the shape it needs (is_object()) before reading it.
nlohmann::json read_json_if_any(const std::filesystem::path& path);

// Replaces `path` with `text`; throws SpeculaError naming the path when it cannot be written.
void write_text(const std::filesystem::path& path, const std::string& text);

}  // namespace specula
