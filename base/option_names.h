// defines: OptionNames, how the one validation of a request names an option in its errors:
// every option has a key ("draft.gamma", as experiment configs spell it); the command line
// names it by its flag ("--gamma"), a config by the key and the file:line that set it.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace specula {

struct OptionNames {
  // The option as the user wrote it: a flag or a key.
  std::function<std::string(std::string_view key)> name = [](std::string_view key) { return std::string(key); };
  // Where it was set, as a message prefix: "" on the command line, "FILE:LINE:COL: " in a config.
  std::function<std::string(std::string_view key)> where = [](std::string_view) { return std::string(); };
  // Whether the user set `key` explicitly (the CLI: the flag was given). Validation refuses an
  // option given where it does not apply; a config point carries every key, so false there.
  std::function<bool(std::string_view key)> given = [](std::string_view) { return false; };

  // where(key) + name(key), the start of an error about `key`.
  std::string at(std::string_view key) const { return where(key) + name(key); }
};

}  // namespace specula
