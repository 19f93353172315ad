// defines: ConfigField, the schema of experiment configs — one entry per dotted key with
// its parser (type, range and file checks; errors name the key and file:line:column) and
// its writer (the resolved config) — and the TOML helpers the config loader shares.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

#include "experiments/config.h"

namespace specula {

struct ConfigField {
  std::string key;  // "draft.gamma"; top-level keys have no dot
  bool sweepable;   // false for keys shared by every point (run.seeds, output.*, ...)
  // Checks `value` and returns the assignment it makes; relative paths resolve against `dir`.
  std::function<Assignment(const toml::node& value, const std::filesystem::path& dir)> parse;
  // Inserts the field's value in `s` into `root` (at its dotted place).
  std::function<void(const Settings& s, toml::table& root)> write;
  bool is_path = false;  // a file or folder, resolved against the config file's folder
};

// Every field, in the order of the documentation.
const std::vector<ConfigField>& config_fields();
// The field named `key`, or nullptr.
const ConfigField* find_config_field(std::string_view key);
// The keys of every field, and those under `section.` when `section` is given.
std::vector<std::string> config_keys(std::string_view section = {});
// The keys a sweep may set: the sweepable fields and the sections that hold them.
std::vector<std::string> sweepable_keys();
// The field `key`; an unknown key throws, suggesting the closest of `candidates` or
// listing `valid`.
const ConfigField& known_field(const std::string& key, const toml::source_region& where,
                               const std::vector<std::string>& candidates, const std::vector<std::string>& valid);

// `given` made absolute against `dir` (the config file's folder) and normalised; never throws
// (a name the file system refuses comes back normalised as written).
std::string resolve_path(const std::filesystem::path& dir, const std::string& given);

// "file:line:column" of a parsed node or key.
std::string source_location(const toml::source_region& region);
// Throws SpeculaError "<file:line:column>: <message>" (just the message for a node read from
// no file).
[[noreturn]] void config_error(const toml::source_region& region, const std::string& message);
// A compact rendering of a value for labels: strings bare, arrays "[3,2,1]", tables "{k=v}".
std::string render_value(const toml::node& value);
// `node` as TOML (a table as sections, a value inline), floats in their short form.
std::string toml_text(const toml::node& node);

}  // namespace specula
