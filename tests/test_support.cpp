#include "tests/test_support.h"

#include "runtime/model_store.h"
#include "tests/test_engine_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

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

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Outcome run_specula(const std::string& args, const std::string& env) {
  static int counter = 0;
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() /
                        ("specula-test-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  const std::string command = env + (env.empty() ? "" : " ") + "'" + SPECULA_BINARY + "' " + args + " >'" + base.string() +
                              ".out' 2>'" + base.string() + ".err' </dev/null";
  const int raw = std::system(command.c_str());
  Outcome o;
  o.exited = raw != -1 && WIFEXITED(raw);
  o.status = o.exited ? WEXITSTATUS(raw) : -1;
  o.out = slurp(base.string() + ".out");
  o.err = slurp(base.string() + ".err");
  fs::remove(base.string() + ".out");
  fs::remove(base.string() + ".err");
  return o;
}

const Backend& shared_backend(const std::string& dir) {
  static ModelStore store;
  return store.get(dir);
}

}  // namespace specula::test
