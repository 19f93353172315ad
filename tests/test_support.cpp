#include "tests/test_support.h"

#include "runtime/model_store.h"
#include "tests/test_engine_support.h"

#include <unistd.h>

namespace specula::test {

std::string source_path(const std::string& relative) { return std::string(SPECULA_SOURCE_DIR) + "/" + relative; }
std::string model_dir(const std::string& name) { return source_path("models/" + name); }

TempDir::TempDir() {
  static int counter = 0;
  path = std::filesystem::temp_directory_path() /
         ("specula-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

const Backend& shared_backend(const std::string& dir) {
  static ModelStore store;
  return store.get(dir);
}

}  // namespace specula::test
