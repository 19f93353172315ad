// defines: Philox, the counter-based generator (Philox4x32-10, Salmon et al. 2011, the one
// cuRAND and PyTorch use) behind every random draw: one stream per (seed, sequence), so
// the same seed gives the same tokens whatever else runs, on the CPU and the GPU alike.
#pragma once

#include <array>
#include <cstdint>

namespace specula {

class Philox {
 public:
  // `stream` separates independent sequences (e.g. sample index) under one seed.
  explicit Philox(uint64_t seed, uint64_t stream = 0) : key_{uint32_t(seed), uint32_t(seed >> 32)} {
    counter_ = {0, 0, uint32_t(stream), uint32_t(stream >> 32)};
  }

  // The 4 x 32 random bits of block `index` of this stream (pure: no state change).
  std::array<uint32_t, 4> block(uint64_t index) const {
    std::array<uint32_t, 4> c{uint32_t(index), uint32_t(index >> 32), counter_[2], counter_[3]};
    std::array<uint32_t, 2> k = key_;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
      const uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
      c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    return c;
  }

  // Next uniform double in [0, 1) with 53 random bits; consumes half a block.
  double uniform() {
    if (lane_ == 0) buffer_ = block(next_block_++);
    const uint64_t hi = buffer_[lane_], lo = buffer_[lane_ + 1];
    lane_ = (lane_ + 2) % 4;
    return double(((hi << 32) | lo) >> 11) * 0x1.0p-53;
  }

  // How many uniforms this stream has produced (for tests and for resuming a stream).
  uint64_t draws() const { return next_block_ * 2 - (lane_ == 2 ? 1 : 0); }

 private:
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> counter_;
  std::array<uint32_t, 4> buffer_{};
  uint64_t next_block_ = 0;
  int lane_ = 0;
};

}  // namespace specula
