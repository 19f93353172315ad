// defines: PackedWeights, a checkpoint weight matrix copied once, at load, into the order the
// matrix-product tiles read it (matmul.h), for one instruction set.
//
// Why: a tile reads 4 or 8 outputs' weights side by side. In the checkpoint's row-major order
// those are 4-8 interleaved streams one row apart, which the hardware prefetcher follows
// badly once the weights leave cache; packed, each thread reads one sequential stream.
//
// Layout, for outputs in groups of kGroup = 4 and k in steps of step() values (the ISA's
// k-step for the dtype: AVX-512 16 f32 / 16 f16 / 32 bf16, AVX2 half that):
//   bytes[g][s][o % 4][step()]   g = o / 4, s = k / step()
// each step's values in stored order and dtype (unless converted on request, so the product's
// arithmetic is exactly the row-major one's). The last step of a row and the last group are zero-padded;
// the tiles never read the padding.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "engine/cpu/matmul_isa.h"
#include "engine/safetensors.h"

namespace specula::cpu {

class PackedWeights {
 public:
  static constexpr int64_t kGroup = 4;

  // Packs w ([out, in], 2-D, any supported dtype, possibly unaligned) for `isa`, in its own
  // dtype or converted to `as` (each value rounded to nearest, ties to even; a research knob:
  // e.g. an F32 draft model read at half the bytes).
  PackedWeights(const TensorView& w, MatmulIsa isa, std::optional<DType> as = std::nullopt);

  MatmulIsa isa() const { return isa_; }
  DType dtype() const { return dtype_; }
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t step() const { return step_; }                 // values per output per step
  int64_t step_bytes() const { return step_bytes_; }     // bytes per output per step
  int64_t group_bytes() const { return group_bytes_; }   // bytes per group of kGroup outputs
  int64_t groups() const { return (out_ + kGroup - 1) / kGroup; }
  const unsigned char* group(int64_t g) const { return bytes_.get() + g * group_bytes_; }
  std::size_t bytes() const { return static_cast<std::size_t>(groups() * group_bytes_); }

 private:
  struct FreeAligned {
    void operator()(unsigned char* p) const;
  };
  MatmulIsa isa_;
  DType dtype_;
  int64_t out_, in_, step_, step_bytes_, group_bytes_;
  std::unique_ptr<unsigned char[], FreeAligned> bytes_;  // 64-byte aligned
};

// The values per k-step of `isa`'s tiles for weights stored as `dtype`.
int64_t k_step(MatmulIsa isa, DType dtype);

}  // namespace specula::cpu
