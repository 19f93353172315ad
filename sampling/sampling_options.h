// defines: Strategy (greedy, sample, beam) and SamplingOptions, the settings of a decoding
// strategy (sampling with temperature / top-k / top-p / min-p, beam search), as the CLI and
// experiment configs give them.
#pragma once

#include <span>

#include "base/enum_names.h"

namespace specula {

enum class Strategy { kGreedy, kSample, kBeam };

inline std::span<const EnumName<Strategy>> enum_names(Strategy) {
  static constexpr EnumName<Strategy> kNames[] = {
      {Strategy::kGreedy, "greedy"}, {Strategy::kSample, "sample"}, {Strategy::kBeam, "beam"}};
  return kNames;
}

struct SamplingOptions {
  Strategy strategy = Strategy::kGreedy;
  float temperature = 1.0f;         // 0 means greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  int beam_width = 4;
  float length_penalty = 1.0f;

  // Sampling (Strategy::kSample) with these transforms; the defaults are plain softmax sampling.
  static SamplingOptions sample(float temperature = 1.0f, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
    SamplingOptions o;
    o.strategy = Strategy::kSample;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.min_p = min_p;
    return o;
  }
  // Beam search (Strategy::kBeam) of this width and length penalty.
  static SamplingOptions beam(int width, float length_penalty = 1.0f) {
    SamplingOptions o;
    o.strategy = Strategy::kBeam;
    o.beam_width = width;
    o.length_penalty = length_penalty;
    return o;
  }
};

}  // namespace specula
