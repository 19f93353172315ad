// Fuzz target: a safetensors file (8-byte header length, JSON header, data) as
// SafetensorsFile maps and validates it. Seeds: the bundled models' headers.
#include "model/safetensors.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = specula::fuzz::input_file("model.safetensors", data, size);
  FUZZ_PARSER(specula::SafetensorsFile file(path));
  return 0;
}
