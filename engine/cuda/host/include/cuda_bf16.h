// The host execution's cuda_bf16.h: nvcc gives every CUDA source the built-ins, so this gives
// them too (engine/cuda/host/runtime.h).
#pragma once
#include "engine/cuda/host/runtime.h"
