// defines: helpers shared by the tests: paths of the bundled models and data.
#pragma once

#include <string>

namespace specula::test {

// <repo>/models/<name>, e.g. model_dir("target-16m").
std::string model_dir(const std::string& name);
// <repo>/<relative>, e.g. source_path("tests/data/hf-greedy.json").
std::string source_path(const std::string& relative);

}  // namespace specula::test
