// defines: the shared part of the fuzz targets: input_file() writes libFuzzer's input to a
// file of this process's scratch folder (the parsers read files), and FUZZ_PARSER wraps a
// parser call so that SpeculaError, the project's error for bad input, is the one exception
// that may come out; any other escapes to libFuzzer, which reports it as a crash.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"

namespace specula::fuzz {

// This process's scratch folder (created once, under the system temp directory).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("specula-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `data` to scratch()/relative and returns its path.
inline std::string input_file(const std::string& relative, const uint8_t* data, std::size_t size) {
  const std::filesystem::path path = scratch() / relative;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                static_cast<std::streamsize>(size));
  return path.string();
}

}  // namespace specula::fuzz

#define FUZZ_PARSER(...)                  \
  try {                                   \
    __VA_ARGS__;                          \
  } catch (const ::specula::SpeculaError&) { \
  }
