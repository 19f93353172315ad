// defines: PackedWeights, a checkpoint weight matrix copied once, at load, into the order the
// matrix-product tiles read it (matmul.h), for one instruction set.
//
// Why: a tile holds a block of outputs in the lanes of 4 vector registers and walks k, so it
// reads the block's weights for one k side by side. In the checkpoint's row-major order those
// are block() streams one row apart; packed, each thread reads one sequential stream.
//
// Layout, for outputs in blocks of block() = 4 vectors of the ISA's lanes (AVX-512 64
// outputs, AVX2 32) and k in steps of pair() values (BF16: 2, a 32-bit pair per output, which
// one register load upcasts into the step's two vectors; F32, F16: 1):
//   bytes[b][s][o % block()][k % pair()]   b = o / block(), s = k / pair()
// values in stored order and dtype (unless converted on request, so the product's arithmetic
// is exactly the row-major one's; BF16 subnormals flushed to zero on request, for bf16dot).
// Outputs past out() and the k past in() of the last step are zero; the tiles never use them.
// The steps may be padded with zeros to a multiple of step_multiple (bf16amx's tiles read 16
// steps at a time: matmul_bf16amx.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "engine/cpu/matmul_isa.h"
#include "model/safetensors.h"

namespace specula::cpu {

class PackedWeights {
 public:
  // Packs w ([out, in], 2-D, any supported dtype, possibly unaligned) for `isa`, in its own
  // dtype or converted to `as` (F32, F16 or BF16; each value rounded to nearest, ties to even;
  // a research knob: e.g. an F32 draft model read at half the bytes). `flush_subnormals`
  // (BF16 only): each subnormal made zero of its sign (what vdpbf16ps reads them as;
  // matmul_bf16dot.h). The steps, ceil(in / pair()), are padded with zero steps up to a
  // multiple of `step_multiple`.
  PackedWeights(const TensorView& w, MatmulIsa isa, std::optional<DType> as = std::nullopt,
                bool flush_subnormals = false, int64_t step_multiple = 1);

  MatmulIsa isa() const { return isa_; }
  DType dtype() const { return dtype_; }
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t block() const { return block_; }               // outputs per block
  int64_t pair() const { return pair_; }                 // k values per output per step
  int64_t step_bytes() const { return step_bytes_; }     // bytes per step of a block
  int64_t steps() const { return block_bytes_ / step_bytes_; }  // steps per block, padding included
  int64_t block_bytes() const { return block_bytes_; }   // bytes per block
  int64_t blocks() const { return (out_ + block_ - 1) / block_; }
  const unsigned char* block_data(int64_t b) const { return bytes_.get() + b * block_bytes_; }
  std::size_t bytes() const { return static_cast<std::size_t>(blocks() * block_bytes_); }

 private:
  struct FreeAligned {
    void operator()(unsigned char* p) const;
  };
  MatmulIsa isa_;
  DType dtype_;
  int64_t out_, in_, block_, pair_, step_bytes_, block_bytes_;
  std::unique_ptr<unsigned char[], FreeAligned> bytes_;  // 64-byte aligned
};

// The outputs per block of `isa`'s tiles (4 vectors of its lanes).
int64_t block_outputs(MatmulIsa isa);

}  // namespace specula::cpu
