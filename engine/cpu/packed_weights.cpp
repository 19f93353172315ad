#include "engine/cpu/packed_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "engine/cpu/matmul.h"
#include "base/error.h"

namespace specula::cpu {

int64_t k_step(MatmulIsa isa, DType dtype) {
  const int64_t lanes = isa == MatmulIsa::avx512 ? 16 : 8;
  return dtype == DType::BF16 ? 2 * lanes : lanes;  // a BF16 step is two vectors (even, odd)
}

void PackedWeights::FreeAligned::operator()(unsigned char* p) const { std::free(p); }

PackedWeights::PackedWeights(const TensorView& w, MatmulIsa isa, std::optional<DType> as)
    : isa_(isa), dtype_(as.value_or(w.dtype)) {
  SPECULA_CHECK(w.shape.size() == 2, w.origin, ": tensor '", w.name, "' must be 2-D for a matrix product");
  SPECULA_CHECK(dtype_ != DType::I8, "PackedWeights holds float dtypes; int8 is PackedInt8 (packed_int8.h)");
  out_ = w.shape[0];
  in_ = w.shape[1];
  const int64_t es = static_cast<int64_t>(dtype_size(dtype_));
  step_ = k_step(isa, dtype_);
  step_bytes_ = step_ * es;
  const int64_t steps = (in_ + step_ - 1) / step_;
  group_bytes_ = steps * kGroup * step_bytes_;
  // aligned_alloc wants a multiple of the alignment; group_bytes_ is one of 64 unless tiny.
  const std::size_t size = (bytes() + 63) / 64 * 64;
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(64, size == 0 ? 64 : size));
  if (raw == nullptr) throw std::bad_alloc();
  bytes_.reset(raw);
  std::memset(raw, 0, size);
  const bool converting = dtype_ != w.dtype;
  std::vector<float> values(converting ? static_cast<std::size_t>(in_) : 0);
  std::vector<unsigned char> converted(converting ? static_cast<std::size_t>(in_ * es) : 0);
  for (int64_t o = 0; o < out_; ++o) {
    unsigned char* dst = raw + (o / kGroup) * group_bytes_ + (o % kGroup) * step_bytes_;
    const unsigned char* row = static_cast<const unsigned char*>(w.data) + o * in_ * es;
    if (converting) {  // exact upcasts through f32; F32 to F16 or BF16 rounds to nearest even
      weight_row(w, o, values.data());
      for (int64_t k = 0; k < in_; ++k) store_value(values[k], dtype_, converted.data() + k * es);
      row = converted.data();
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t count = std::min(step_, in_ - s * step_);
      std::memcpy(dst + s * kGroup * step_bytes_, row + s * step_bytes_, static_cast<std::size_t>(count * es));
    }
  }
}

}  // namespace specula::cpu
