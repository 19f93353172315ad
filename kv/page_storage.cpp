#include "kv/page_storage.h"

#include <algorithm>
#include <cassert>

#include "base/error.h"

namespace specula {

PageStorage::PageStorage(KvLayout layout, int num_blocks) : layout_(layout), num_blocks_(num_blocks) {
  SPECULA_CHECK(layout.num_layers > 0 && layout.num_kv_heads > 0 && layout.head_dim > 0,
                "kv cache: layers, kv heads and head_dim must be positive");
  SPECULA_CHECK(layout.block_size > 0, "kv cache: block size must be positive, got ", layout.block_size);
  SPECULA_CHECK(num_blocks > 0, "kv cache: number of blocks must be positive, got ", num_blocks);
  value_offset_ = static_cast<std::size_t>(layout.block_size) * static_cast<std::size_t>(layout.kv_dim());
  if (layout.device_pages) {
    SPECULA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16, "kv cache: device pages in ",
                  dtype_name(layout.dtype), " are not supported (F32 or BF16)");
    return;  // the backend allocates them at its first forward
  }
  SPECULA_CHECK(layout.dtype == DType::F32, "kv cache: pages in ", dtype_name(layout.dtype),
                " are not supported by the host storage (F32)");
  layers_.assign(static_cast<std::size_t>(layout.num_layers),
                 std::vector<float>(block_stride() * static_cast<std::size_t>(num_blocks), 0.0f));
}

float* PageStorage::row(int l, int kv, int slot) {
  const int bs = layout_.block_size;
  assert(!layout_.device_pages && slot >= 0 && slot / bs < num_blocks_ && (kv == 0 || kv == 1));
  return layer(l) + static_cast<std::size_t>(slot / bs) * block_stride() + kv * value_offset_ +
         static_cast<std::size_t>(slot % bs) * static_cast<std::size_t>(layout_.kv_dim());
}

const float* PageStorage::row(int l, int kv, int slot) const { return const_cast<PageStorage*>(this)->row(l, kv, slot); }

void PageStorage::execute(std::span<const KvCopy> copies) {
  if (layout_.device_pages) {
    device_copies_.insert(device_copies_.end(), copies.begin(), copies.end());
    return;
  }
  const std::size_t kv_dim = static_cast<std::size_t>(layout_.kv_dim());
  for (const KvCopy& c : copies) {
    for (int l = 0; l < layout_.num_layers; ++l) {
      if (c.kind == KvCopy::Kind::kBlock) {
        const float* src = layer(l) + static_cast<std::size_t>(c.src) * block_stride();
        std::copy_n(src, block_stride(), layer(l) + static_cast<std::size_t>(c.dst) * block_stride());
      } else {
        for (int kv = 0; kv < 2; ++kv) std::copy_n(row(l, kv, c.src), kv_dim, row(l, kv, c.dst));
      }
    }
  }
}

}  // namespace specula
