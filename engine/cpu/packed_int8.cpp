#include "engine/cpu/packed_int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "base/error.h"
#include "engine/cpu/matmul.h"

namespace specula::cpu {
namespace {

// The f16 bits of the smallest f16 >= v (v finite, >= 0, <= 65504).
uint16_t f16_at_least(double v) {
  uint16_t h = _cvtss_sh(static_cast<float>(v), _MM_FROUND_TO_NEAREST_INT);
  // Positive f16 bit patterns are ordered like their values: step up until it covers v.
  while (static_cast<double>(_cvtsh_ss(h)) < v) ++h;
  return h;
}

}  // namespace

void PackedInt8::FreeAligned::operator()(unsigned char* p) const { std::free(p); }

PackedInt8::PackedInt8(const TensorView& w) {
  SPECULA_CHECK(w.shape.size() == 2, w.origin, ": tensor '", w.name, "' must be 2-D for a matrix product");
  out_ = w.shape[0];
  in_ = w.shape[1];
  blocks_ = (in_ + kBlock - 1) / kBlock;
  group_bytes_ = (blocks_ * (kBlockQuadBytes + kOutputs * 2) + 63) / 64 * 64;
  const std::size_t size = std::max<std::size_t>(bytes(), 64);
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(64, size));
  if (raw == nullptr) throw std::bad_alloc();
  bytes_.reset(raw);
  std::memset(raw, 128, size);  // q = 0 everywhere, scales overwritten below
  for (int64_t g = 0; g < groups(); ++g)
    std::memset(raw + g * group_bytes_ + blocks_ * kBlockQuadBytes, 0, static_cast<std::size_t>(blocks_ * kOutputs * 2));
  std::vector<float> row(static_cast<std::size_t>(in_));
  for (int64_t o = 0; o < out_; ++o) {
    weight_row(w, o, row.data());
    unsigned char* group_base = raw + (o / kOutputs) * group_bytes_;
    auto* scale_out = reinterpret_cast<uint16_t*>(group_base + blocks_ * kBlockQuadBytes);
    const int64_t lane = o % kOutputs;
    for (int64_t b = 0; b < blocks_; ++b) {
      const int64_t k0 = b * kBlock, k1 = std::min(in_, k0 + kBlock);
      double amax = 0;
      for (int64_t k = k0; k < k1; ++k) {
        SPECULA_CHECK(std::isfinite(row[k]), w.origin, ": tensor '", w.name, "' has a non-finite value at [", o, ", ", k,
                      "]: it cannot be quantised to int8");
        amax = std::max(amax, std::fabs(double(row[k])));
      }
      SPECULA_CHECK(amax / 127 <= 65504.0, w.origin, ": tensor '", w.name, "' row ", o, " has |w| = ", amax,
                    ", beyond the int8 scales' f16 range (127 x 65504)");
      const uint16_t h_bits = f16_at_least(amax / 127);
      const double h = _cvtsh_ss(h_bits);
      scale_out[b * kOutputs + lane] = h_bits;
      for (int64_t k = k0; k < k1; ++k) {
        const double q = h == 0 ? 0 : std::clamp(std::nearbyint(double(row[k]) / h), -127.0, 127.0);
        const int64_t j = (k - k0) / 4, t = (k - k0) % 4;
        group_base[b * kBlockQuadBytes + j * kQuadBytes + lane * 4 + t] = static_cast<unsigned char>(int(q) + 128);
      }
    }
  }
}

int PackedInt8::q(int64_t o, int64_t k) const {
  const int64_t b = k / kBlock, j = (k % kBlock) / 4, t = k % 4;
  return int(group(o / kOutputs)[b * kBlockQuadBytes + j * kQuadBytes + (o % kOutputs) * 4 + t]) - 128;
}

float PackedInt8::scale(int64_t o, int64_t block) const {
  return _cvtsh_ss(scales(o / kOutputs)[block * kOutputs + o % kOutputs]);
}

}  // namespace specula::cpu
