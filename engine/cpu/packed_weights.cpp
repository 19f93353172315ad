#include "engine/cpu/packed_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16dot.h"
#include "base/error.h"

namespace specula::cpu {

int64_t block_outputs(MatmulIsa isa) { return 4 * (isa == MatmulIsa::avx512 ? 16 : 8); }

void PackedWeights::FreeAligned::operator()(unsigned char* p) const { std::free(p); }

PackedWeights::PackedWeights(const TensorView& w, MatmulIsa isa, std::optional<DType> as, bool flush_subnormals,
                             int64_t step_multiple)
    : isa_(isa), dtype_(as.value_or(w.dtype)) {
  SPECULA_CHECK(w.shape.size() == 2, w.origin, ": tensor '", w.name, "' must be 2-D for a matrix product");
  SPECULA_CHECK(!flush_subnormals || dtype_ == DType::BF16, "PackedWeights: only BF16 subnormals are flushed");
  out_ = w.shape[0];
  in_ = w.shape[1];
  const int64_t es = static_cast<int64_t>(dtype_size(dtype_));
  block_ = block_outputs(isa);
  pair_ = dtype_ == DType::BF16 ? 2 : 1;
  step_bytes_ = block_ * pair_ * es;
  SPECULA_CHECK(step_multiple >= 1, "PackedWeights: step_multiple must be positive, got ", step_multiple);
  const int64_t steps = (in_ + pair_ - 1) / pair_;
  block_bytes_ = (steps + step_multiple - 1) / step_multiple * step_multiple * step_bytes_;
  // aligned_alloc wants a multiple of the alignment; block_bytes_ is one of 64.
  const std::size_t size = std::max<std::size_t>(bytes(), 64);
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(64, size));
  if (raw == nullptr) throw std::bad_alloc();
  bytes_.reset(raw);
  std::memset(raw, 0, size);
  const bool converting = dtype_ != w.dtype;
  std::vector<float> values(converting ? static_cast<std::size_t>(in_) : 0);
  std::vector<unsigned char> converted(converting ? static_cast<std::size_t>(in_ * es) : 0);
  for (int64_t o = 0; o < out_; ++o) {
    unsigned char* dst = raw + (o / block_) * block_bytes_ + (o % block_) * pair_ * es;
    const unsigned char* row = static_cast<const unsigned char*>(w.data) + o * in_ * es;
    if (converting) {  // exact upcasts through f32; F32 to F16 or BF16 rounds to nearest even
      weight_row(w, o, values.data());
      for (int64_t k = 0; k < in_; ++k) store_value(values[k], dtype_, converted.data() + k * es);
      row = converted.data();
    }
    // A full step is 4 bytes (a BF16 pair, an F32) or 2 (an F16); an odd in's last BF16 step
    // holds one value.
    const int64_t full = in_ / pair_;
    const auto copy_steps = [&]<int kBytes>() {
      for (int64_t s = 0; s < full; ++s) std::memcpy(dst + s * step_bytes_, row + s * kBytes, kBytes);
    };
    if (pair_ * es == 4) copy_steps.template operator()<4>();
    else copy_steps.template operator()<2>();
    if (full < steps) std::memcpy(dst + full * step_bytes_, row + full * pair_ * es, static_cast<std::size_t>(es));
  }
  if (flush_subnormals)
    for (std::size_t i = 0; i < bytes(); i += 2) {
      uint16_t b;
      std::memcpy(&b, raw + i, 2);
      b = bf16_flush_subnormal(b);
      std::memcpy(raw + i, &b, 2);
    }
}

}  // namespace specula::cpu
