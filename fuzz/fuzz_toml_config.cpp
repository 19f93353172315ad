// Fuzz target: an experiment config as load_config reads it (TOML, keys, types, ranges,
// sweeps, files), from a folder beside links to the repository's models/ and
// configs/prompts/, so that the shipped configs' relative paths resolve. Seeds: configs/*.toml.
#include <filesystem>

#include "experiments/config.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const bool linked = [] {
    const fs::path root = specula::fuzz::scratch();
    fs::create_directories(root / "configs");
    if (!fs::exists(root / "models")) fs::create_symlink(fs::path(SPECULA_SOURCE_DIR) / "models", root / "models");
    if (!fs::exists(root / "configs" / "prompts"))
      fs::create_symlink(fs::path(SPECULA_SOURCE_DIR) / "configs" / "prompts", root / "configs" / "prompts");
    return true;
  }();
  (void)linked;
  const std::string path = specula::fuzz::input_file("configs/fuzz.toml", data, size);
  FUZZ_PARSER(specula::load_config(path));
  return 0;
}
