// The CUDA module is loaded only when CUDA is asked for: a CPU run, in this process and in the
// `specula` program, maps neither the module nor the CUDA runtime nor cuBLASLt, and asking for
// a device count loads them (in a build with CUDA), which shows that the checks can fail.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/device.h"
#include "runtime/generate.h"
#include "runtime/model_store.h"
#include "tests/test_support.h"

namespace specula {
namespace {

constexpr const char* kCudaLibraries[] = {"libspecula_cuda", "libcudart", "libcublas"};

// The lines of /proc/self/maps that name one of kCudaLibraries.
std::string cuda_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line))
    for (const char* lib : kCudaLibraries)
      if (line.find(lib) != std::string::npos) found += line + "\n";
  return found;
}

// The libraries of kCudaLibraries that the dynamic loader's LD_DEBUG=libs output shows loaded.
std::string cuda_loads(const std::string& ld_debug) {
  std::istringstream in(ld_debug);
  std::string line, found;
  while (std::getline(in, line))
    if (line.find("calling init:") != std::string::npos)
      for (const char* lib : kCudaLibraries)
        if (line.find(lib) != std::string::npos) found += line + "\n";
  return found;
}

TEST_CASE("cuda loader: a CPU run in this process maps no CUDA library", "[engine][cuda]") {
  if (cuda_module_loaded()) {
    WARN("skipped: an earlier test in this process asked for CUDA");
    return;
  }
  ModelStore models;
  GenerateOptions o;
  o.model_dir = test::model_dir("draft-1m");
  o.prompt_ids = {1, 265, 4027};
  o.max_new_tokens = 4;
  const nlohmann::json result = generate(models, o);
  CHECK(result.at("ids").size() == 4);
  CHECK_FALSE(cuda_module_loaded());
  CHECK(cuda_mappings().empty());

  // Asking for a device loads the module where the build has one: the check above would see it.
  cuda_device_count();
  if (cuda_module_path().empty()) {
    CHECK_FALSE(cuda_module_loaded());
    CHECK_THAT(cuda_unavailable_reason(), Catch::StartsWith("built without CUDA"));
  } else {
    CHECK(cuda_module_loaded());
    const std::string mapped = cuda_mappings();
    CHECK_THAT(mapped, Catch::Contains("libspecula_cuda") && Catch::Contains("libcublasLt"));
  }
}

TEST_CASE("cuda loader: `specula generate --backend cpu` loads no CUDA library", "[engine][cuda][cli]") {
  const std::string model = "--model '" + test::model_dir("draft-1m") + "' --prompt-ids 1,265 --max-new-tokens 2";
  const test::Outcome cpu = test::run_specula("generate " + model + " --backend cpu --json", "LD_DEBUG=libs");
  INFO("stderr: " << cpu.err);
  REQUIRE(cpu.exited);
  REQUIRE(cpu.status == 0);
  CHECK_THAT(cpu.err, Catch::Contains("calling init:"));  // LD_DEBUG reached the program
  CHECK(cuda_loads(cpu.err).empty());

  // --backend cuda asks for a device, so the program loads the module where the build has one.
  const test::Outcome gpu = test::run_specula("generate " + model + " --backend cuda --json", "LD_DEBUG=libs");
  REQUIRE(gpu.exited);
  if (cuda_module_path().empty()) {
    CHECK(cuda_loads(gpu.err).empty());
  } else {
    CHECK_THAT(cuda_loads(gpu.err), Catch::Contains("libspecula_cuda") && Catch::Contains("libcublasLt"));
  }
}

}  // namespace
}  // namespace specula
