// Fuzz target: config.json as parse_model_config reads it, then the same text as a
// generation_config.json over the bundled draft's config. Seeds: the bundled config.json and
// generation_config.json files.
#include "model/model_config.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  FUZZ_PARSER(specula::parse_model_config(text, "config.json"));
  static const specula::ModelConfig base =
      specula::load_model_config(std::string(SPECULA_SOURCE_DIR) + "/models/draft-1m/config.json");
  specula::ModelConfig config = base;
  FUZZ_PARSER(specula::apply_generation_config(config, text, "generation_config.json"));
  return 0;
}
