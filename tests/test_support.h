// defines: helpers shared by the tests: paths of the bundled models and data, and TempDir.
#pragma once

#include <filesystem>
#include <string>

namespace specula::test {

// True in the AddressSanitizer + UndefinedBehaviorSanitizer build, where tests that run the
// models thousands of times use fewer samples (each says what that costs in power).
#ifdef SPECULA_SANITIZE
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// <repo>/models/<name>, e.g. model_dir("target-16m").
std::string model_dir(const std::string& name);
// <repo>/<relative>, e.g. source_path("tests/data/hf-greedy.json").
std::string source_path(const std::string& relative);

// A fresh folder under the system temp directory (unique per process and instance), removed
// with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// The text of a file ("" when it cannot be read).
std::string slurp(const std::filesystem::path& path);

// What running the built `specula` binary gave.
struct Outcome {
  bool exited = false;  // false: killed by a signal
  int status = -1;
  std::string out, err;
};

// Runs `specula <args>` (args are shell words, already quoted where needed), stdin empty, with
// the environment's assignments in `env` ("NAME=value ...", shell words) added.
Outcome run_specula(const std::string& args, const std::string& env = "");

}  // namespace specula::test
