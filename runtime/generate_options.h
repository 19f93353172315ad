// defines: GenerateOptions, every setting of one generation request — what
// `specula generate` flags and a resolved experiment-config point both map to — and its
// validation (errors name the flag / key).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draft/draft_options.h"
#include "sampling/sampling_options.h"

namespace specula {

struct GenerateOptions {
  std::string model_dir;        // target model folder
  std::vector<int> prompt_ids;  // used as given (BOS included by the caller when wanted)
  int max_new_tokens = 64;
  uint64_t seed = 0;
  int num_samples = 1;
  int kv_block_size = 16;
  int threads = 0;              // 0 = all cores
  std::string backend = "cpu";  // cpu | cuda
  SamplingOptions sampling;
  DraftOptions draft;
};

}  // namespace specula
