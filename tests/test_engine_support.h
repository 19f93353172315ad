// defines: helpers of the engine tests: Rows (one sequence's forward rows, as single-sequence
// tests write them), Engine (a backend with a KV cache and a workspace of its own: the
// one-sequence driver over ForwardContext), shared_backend (a model folder on the CPU backend,
// loaded once per process) and bf16_nearest_even (a plain BF16 rounding reference).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"

namespace specula::test {

struct Rows {
  std::span<const int> tokens;     // in [n]
  std::span<const int> positions;  // in [n]
  std::span<const int> parents;    // in [T + n] or empty (engine/batch.h)
  bool all_logits = true;          // false: the last row's logits only
};

class Engine {
 public:
  Engine(const Backend& backend, int block_size, int num_blocks)
      : Engine(backend, backend.kv_layout(block_size), num_blocks) {}
  // A cache of `layout` (the backend's, in another KV dtype).
  Engine(const Backend& backend, const KvLayout& layout, int num_blocks)
      : cache(layout, num_blocks), backend_(backend), workspace_(backend.make_workspace()) {}

  const ModelConfig& config() const { return backend_.config(); }
  ForwardContext context() { return {backend_, cache, *workspace_}; }
  // One forward of `rows` appended to seq.  logits: out [n or 1, vocab]
  void forward(int seq, const Rows& rows, std::span<float> logits) {
    context().run(SequenceRows{seq, rows.tokens, rows.positions, rows.parents,
                               rows.all_logits ? RowLogits::kAll : RowLogits::kLast},
                  logits);
  }

  // `tokens` at positions 0, 1, ... into an empty seq.  Returns every row's logits [n, vocab]
  std::vector<float> prefill(int seq, std::span<const int> tokens) {
    std::vector<int> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(config().vocab_size));
    forward(seq, {tokens, positions, {}, true}, logits);
    return logits;
  }

  KvCache cache;

 private:
  const Backend& backend_;
  std::unique_ptr<Workspace> workspace_;
};

// The model in `dir` on the CPU backend (matrices as stored), loaded once per process.
const Backend& shared_backend(const std::string& dir);

// The BF16 value nearest to finite v, ties to the even one: of v truncated and the next
// BF16 away from zero, whichever is closer.
inline uint16_t bf16_nearest_even(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const auto as_float = [](uint16_t b) {
    const uint32_t wide = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    return double(f);
  };
  const uint16_t toward_zero = static_cast<uint16_t>(bits >> 16), away = static_cast<uint16_t>(toward_zero + 1);
  const double below = std::abs(double(v) - as_float(toward_zero)), above = std::abs(as_float(away) - double(v));
  if (below != above) return below < above ? toward_zero : away;
  return (toward_zero & 1) ? away : toward_zero;
}

}  // namespace specula::test
