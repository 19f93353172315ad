#include "tests/test_support.h"

namespace specula::test {

std::string source_path(const std::string& relative) { return std::string(SPECULA_SOURCE_DIR) + "/" + relative; }
std::string model_dir(const std::string& name) { return source_path("models/" + name); }

}  // namespace specula::test
