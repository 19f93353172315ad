// defines: cuda_module_path and cuda_module_loaded, what the program knows of the CUDA backend's
// shared module (cuda_module.h) before and after loading it. The functions of device.h,
// cuda_backend.h and kernel_harness.h load it on their first call (cuda_loader.cpp).
#pragma once

#include <string>

namespace specula {

// The module this build loads: SPECULA_CUDA_MODULE from the environment when set, else the
// one the build wrote; "" in a build without CUDA.
std::string cuda_module_path();
// Whether this process has loaded the module (and with it the CUDA runtime and cuBLASLt).
bool cuda_module_loaded();

}  // namespace specula
