// The host execution's cuda_runtime.h (engine/cuda/host/runtime.h).
#pragma once
#include "engine/cuda/host/runtime.h"
