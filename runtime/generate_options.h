// defines: GenerateOptions, every setting of one generation request — what
// `specula generate` flags and a resolved experiment-config point both map to — and its
// validation (errors name the flag / key).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specula {

struct SamplingOptions {
  std::string strategy = "greedy";  // greedy | sample | beam
  float temperature = 1.0f;         // 0 means greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  int beam_width = 4;
  float length_penalty = 1.0f;

  // Sampling ("sample") with these transforms; the defaults are plain softmax sampling.
  static SamplingOptions sample(float temperature = 1.0f, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
    SamplingOptions o;
    o.strategy = "sample";
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.min_p = min_p;
    return o;
  }
};

struct DraftOptions {
  std::string method = "none";  // none | model | ngram
  std::string model_dir;        // for method = model
  std::string weights = "stored";  // stored | f32 | f16 | bf16: the dtype the draft's matrices are read in
  int gamma = 4;                // chain length (and n-gram proposal length)
  std::vector<int> tree;        // static tree branching, e.g. {3,2,1,1}; empty = chain
  int tree_budget = 0;          // > 0: dynamic tree with this many nodes
  int ngram_min = 1;
  int ngram_max = 3;
  bool adaptive = false;        // adaptive chain length
};

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
