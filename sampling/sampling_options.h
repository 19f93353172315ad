// defines: SamplingOptions, the settings of a decoding strategy (greedy, sampling with
// temperature / top-k / top-p / min-p, beam search), as the CLI and experiment configs give them.
#pragma once

#include <string>

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

}  // namespace specula
