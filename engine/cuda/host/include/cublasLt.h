// The host execution's cublasLt.h (engine/cuda/host/cublaslt.h).
#pragma once
#include "engine/cuda/host/cublaslt.h"
