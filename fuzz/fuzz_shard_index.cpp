// Fuzz target: model.safetensors.index.json as Checkpoint reads a sharded folder (the folder
// holds the index alone, or a link to the bundled target's shards when the index names them).
// Seeds: models/target-16m/model.safetensors.index.json.
#include <filesystem>

#include "model/safetensors.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const fs::path d = specula::fuzz::scratch() / "sharded";
    fs::create_directories(d);
    const fs::path models = fs::path(SPECULA_SOURCE_DIR) / "models" / "target-16m";
    for (const auto& e : fs::directory_iterator(models))
      if (e.path().extension() == ".safetensors" && !fs::exists(d / e.path().filename()))
        fs::create_symlink(e.path(), d / e.path().filename());
    return d;
  }();
  specula::fuzz::input_file("sharded/model.safetensors.index.json", data, size);
  FUZZ_PARSER(specula::Checkpoint checkpoint(dir.string()));
  return 0;
}
