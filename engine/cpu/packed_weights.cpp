#include "engine/cpu/packed_weights.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/error.h"

namespace specula::cpu {

int64_t k_step(MatmulIsa isa, DType dtype) {
  const int64_t lanes = isa == MatmulIsa::avx512 ? 16 : 8;
  return dtype == DType::BF16 ? 2 * lanes : lanes;  // a BF16 step is two vectors (even, odd)
}

void PackedWeights::FreeAligned::operator()(unsigned char* p) const { std::free(p); }

namespace {

// Row `row` of w written as `to` at dst (exact upcasts through f32; F32 to F16 or BF16 rounds
// to nearest even). values: scratch [in].
void convert_row(const TensorView& w, int64_t row, DType to, std::vector<float>& values, unsigned char* dst) {
  weight_row(w, row, values.data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (to == DType::F32) {
      std::memcpy(dst + 4 * i, &v, 4);
    } else if (to == DType::F16) {
      const uint16_t h = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
      std::memcpy(dst + 2 * i, &h, 2);
    } else {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t b = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);  // finite weights
      std::memcpy(dst + 2 * i, &b, 2);
    }
  }
}

}  // namespace

PackedWeights::PackedWeights(const TensorView& w, MatmulIsa isa, std::optional<DType> as)
    : isa_(isa), dtype_(as.value_or(w.dtype)) {
  SPECULA_CHECK(w.shape.size() == 2, w.origin, ": tensor '", w.name, "' must be 2-D for a matrix product");
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
    if (converting) {
      convert_row(w, o, dtype_, values, converted.data());
      row = converted.data();
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t count = std::min(step_, in_ - s * step_);
      std::memcpy(dst + s * kGroup * step_bytes_, row + s * step_bytes_, static_cast<std::size_t>(count * es));
    }
  }
}

}  // namespace specula::cpu
