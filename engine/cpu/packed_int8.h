// defines: PackedInt8, a checkpoint weight matrix quantised once, at load, to int8 with one f16
// scale per block of kBlock = 32 values along k, in the order the int8 product reads it
// (matmul_int8.h).
//
// Quantisation (per output o, per block b of k): h = the f16 value nearest above
// max|w| / 127 over the block, q = round(w / h) in [-127, 127] (0 where h = 0), so
// |w - h q| <= h / 2. Weights may be F32, F16 or BF16; a block whose scale exceeds the
// f16 range (max|w| > 127 * 65504) or that holds a non-finite value is refused naming the
// tensor.
//
// Layout, for outputs in groups of kOutputs = 16 and nb = ceil(in / 32) blocks:
//   group g (group_bytes() each, 64-byte aligned):
//     quads  [nb][8][16][4] u8   q + 128 of output 16 g + o, k = 32 b + 4 j + t  (j, o, t)
//     scales [nb][16]       f16  h of block b for output 16 g + o
// One 64-byte quad line holds 4 consecutive k of 16 outputs: the u8 operand of one
// vpdpbusd (AVX-512 VNNI) or two 8-output halves for AVX2. The last block of a row and the
// last group are padded with q = 0 (byte 128) and scale 0; the kernels never store padding.
#pragma once

#include <cstdint>
#include <memory>

#include "model/safetensors.h"

namespace specula::cpu {

class PackedInt8 {
 public:
  static constexpr int64_t kBlock = 32;     // k values per scale
  static constexpr int64_t kOutputs = 16;   // outputs per group
  static constexpr int64_t kQuadBytes = kOutputs * 4;  // one quad line: 4 k of 16 outputs
  static constexpr int64_t kBlockQuadBytes = kBlock / 4 * kQuadBytes;  // 512: one block of a group

  // Quantises w ([out, in], 2-D, F32 / F16 / BF16) as above.
  explicit PackedInt8(const TensorView& w);

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t blocks() const { return blocks_; }
  int64_t groups() const { return (out_ + kOutputs - 1) / kOutputs; }
  int64_t group_bytes() const { return group_bytes_; }
  const unsigned char* group(int64_t g) const { return bytes_.get() + g * group_bytes_; }
  // The f16 scales of group g: [blocks()][16].
  const uint16_t* scales(int64_t g) const {
    return reinterpret_cast<const uint16_t*>(group(g) + blocks_ * kBlockQuadBytes);
  }
  std::size_t bytes() const { return static_cast<std::size_t>(groups() * group_bytes_); }

  // The quantised values, for the references and tests: q in [-127, 127] and the block's scale.
  int q(int64_t o, int64_t k) const;
  float scale(int64_t o, int64_t block) const;

 private:
  struct FreeAligned {
    void operator()(unsigned char* p) const;
  };
  int64_t out_, in_, blocks_, group_bytes_;
  std::unique_ptr<unsigned char[], FreeAligned> bytes_;  // 64-byte aligned
};

}  // namespace specula::cpu
