#include "kv/page_storage.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"

namespace specula {

std::size_t kv_dtype_size(KvDType t) {
  switch (t) {
    case KvDType::kF32: return 4;
    case KvDType::kBF16: return 2;
    case KvDType::kInt8: return 1;
  }
  return 0;
}

std::size_t KvLayout::block_bytes() const {
  const std::size_t elements = 2 * static_cast<std::size_t>(num_layers) * static_cast<std::size_t>(block_size) *
                               static_cast<std::size_t>(kv_dim());
  const std::size_t scales = dtype == KvDType::kInt8 ? elements / static_cast<std::size_t>(head_dim) * 4 : 0;
  return elements * kv_dtype_size(dtype) + scales;
}

PageStorage::PageStorage(KvLayout layout, int num_blocks)
    : layout_(layout), num_blocks_(num_blocks), elem_(kv_dtype_size(layout.dtype)) {
  SPECULA_CHECK(layout.num_layers > 0 && layout.num_kv_heads > 0 && layout.head_dim > 0,
                "kv cache: layers, kv heads and head_dim must be positive");
  SPECULA_CHECK(layout.block_size > 0, "kv cache: block size must be positive, got ", layout.block_size);
  SPECULA_CHECK(num_blocks > 0, "kv cache: number of blocks must be positive, got ", num_blocks);
  value_offset_ = static_cast<std::size_t>(layout.block_size) * static_cast<std::size_t>(layout.kv_dim());
  if (layout.device_pages) {
    SPECULA_CHECK(layout.dtype == KvDType::kF32 || layout.dtype == KvDType::kBF16, "kv cache: device pages in ",
                  name_of(layout.dtype), " are not supported (f32 or bf16)");
    return;  // the backend allocates them at its first forward
  }
  const std::size_t elements = block_stride() * static_cast<std::size_t>(num_blocks);
  for (int l = 0; l < layout.num_layers; ++l) {
    layers_.emplace_back((elements * elem_ + 3) / 4);
    if (layout.dtype == KvDType::kInt8) scales_.emplace_back(elements / static_cast<std::size_t>(layout.head_dim));
  }
}

const float* PageStorage::layer_scales(int l) const {
  return scales_.empty() ? nullptr : scales_[static_cast<std::size_t>(l)].data();
}

float* PageStorage::layer(int l) {
  assert(layout_.dtype == KvDType::kF32 && !layout_.device_pages);
  return layers_[static_cast<std::size_t>(l)].data();
}

std::size_t PageStorage::row_offset(int kv, int slot) const {
  const int bs = layout_.block_size;
  assert(!layout_.device_pages && slot >= 0 && slot / bs < num_blocks_ && (kv == 0 || kv == 1));
  return static_cast<std::size_t>(slot / bs) * block_stride() + static_cast<std::size_t>(kv) * value_offset_ +
         static_cast<std::size_t>(slot % bs) * static_cast<std::size_t>(layout_.kv_dim());
}

float* PageStorage::row(int l, int kv, int slot) { return layer(l) + row_offset(kv, slot); }

void PageStorage::write_row(int l, int kv, int slot, const float* src) {
  const std::size_t at = row_offset(kv, slot);
  const int kv_dim = layout_.kv_dim(), head_dim = layout_.head_dim;
  unsigned char* dst = reinterpret_cast<unsigned char*>(layers_[static_cast<std::size_t>(l)].data()) + at * elem_;
  switch (layout_.dtype) {
    case KvDType::kF32: std::memcpy(dst, src, static_cast<std::size_t>(kv_dim) * 4); return;
    case KvDType::kBF16:
      for (int i = 0; i < kv_dim; ++i) store_value(src[i], DType::BF16, dst + 2 * static_cast<std::size_t>(i));
      return;
    case KvDType::kInt8: {
      float* scale = scales_[static_cast<std::size_t>(l)].data() + at / static_cast<std::size_t>(head_dim);
      for (int h = 0; h < layout_.num_kv_heads; ++h) {
        const float* x = src + static_cast<std::size_t>(h) * head_dim;
        float max_abs = 0.0f;
        for (int d = 0; d < head_dim; ++d) max_abs = std::max(max_abs, std::fabs(x[d]));
        bool finite = true;
        for (int d = 0; d < head_dim; ++d) finite = finite && std::isfinite(x[d]);
        // A non-finite value makes the head NaN, as it would poison f32 attention (the integers
        // stay 0: no NaN reaches the conversion).
        const float s = finite ? max_abs / 127.0f : NAN;
        scale[h] = s;
        for (int d = 0; d < head_dim; ++d) {
          const float q = s > 0.0f ? std::clamp(std::nearbyint(x[d] / s), -127.0f, 127.0f) : 0.0f;
          dst[static_cast<std::size_t>(h) * head_dim + d] = static_cast<unsigned char>(static_cast<int8_t>(q));
        }
      }
      return;
    }
  }
}

void PageStorage::read_row(int l, int kv, int slot, float* out) const {
  const std::size_t at = row_offset(kv, slot);
  const int kv_dim = layout_.kv_dim();
  const unsigned char* src =
      reinterpret_cast<const unsigned char*>(layers_[static_cast<std::size_t>(l)].data()) + at * elem_;
  for (int i = 0; i < kv_dim; ++i) {
    if (layout_.dtype == KvDType::kF32) {
      std::memcpy(&out[i], src + 4 * static_cast<std::size_t>(i), 4);
    } else if (layout_.dtype == KvDType::kBF16) {
      uint16_t half;
      std::memcpy(&half, src + 2 * static_cast<std::size_t>(i), 2);
      const uint32_t bits = static_cast<uint32_t>(half) << 16;
      std::memcpy(&out[i], &bits, 4);
    } else {
      const float s = layer_scales(l)[(at + static_cast<std::size_t>(i)) / static_cast<std::size_t>(layout_.head_dim)];
      out[i] = s * static_cast<float>(static_cast<int8_t>(src[i]));
    }
  }
}

void PageStorage::execute(std::span<const KvCopy> copies) {
  if (layout_.device_pages) {
    device_copies_.insert(device_copies_.end(), copies.begin(), copies.end());
    return;
  }
  const std::size_t kv_dim = static_cast<std::size_t>(layout_.kv_dim());
  const std::size_t head_dim = static_cast<std::size_t>(layout_.head_dim);
  // Elements [from, from + count) of layer l to [to, to + count), and their scales.
  const auto move = [&](int l, std::size_t from, std::size_t to, std::size_t count) {
    unsigned char* base = reinterpret_cast<unsigned char*>(layers_[static_cast<std::size_t>(l)].data());
    std::memmove(base + to * elem_, base + from * elem_, count * elem_);
    if (!scales_.empty()) {
      float* s = scales_[static_cast<std::size_t>(l)].data();
      std::memmove(s + to / head_dim, s + from / head_dim, count / head_dim * sizeof(float));
    }
  };
  for (const KvCopy& c : copies) {
    for (int l = 0; l < layout_.num_layers; ++l) {
      if (c.kind == KvCopy::Kind::kBlock) {
        move(l, static_cast<std::size_t>(c.src) * block_stride(), static_cast<std::size_t>(c.dst) * block_stride(),
             block_stride());
      } else {
        for (int kv = 0; kv < 2; ++kv) move(l, row_offset(kv, c.src), row_offset(kv, c.dst), kv_dim);
      }
    }
  }
}

}  // namespace specula
