// defines: KvDType (the element type of KV pages: f32, bf16, or int8 with per-(slot, head)
// scales), KvLayout (the shape of a model's cache) and PageStorage, the K/V data of every
// block in host memory, one array per layer laid out [num_blocks, 2 (K, V), block_size,
// num_kv_heads, head_dim] — the layout a paged-attention kernel reads through page lists — plus,
// for int8, one f32 scale per (slot, kv head) in a parallel array per layer [num_blocks, 2,
// block_size, num_kv_heads]; the writer that rounds a row into its dtype, and the executor of
// the copy lists block-table operations return (pages and scales alike); or, for a layout with
// device_pages, the handle of pages a device backend owns (DevicePages) and the queue of
// copies it runs there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/enum_names.h"
#include "base/memory.h"
#include "kv/kv_plan.h"

namespace specula {

// KV page elements. bf16: each value rounded to nearest, ties to even (relative error <= 2^-8).
// int8: symmetric per (slot, kv head): scale = max |x| / 127 over the head's head_dim values,
// q = round(x / scale) in [-127, 127], read back as scale * q (error <= scale / 2 per element).
enum class KvDType { kF32, kBF16, kInt8 };

inline std::span<const EnumName<KvDType>> enum_names(KvDType) {
  static constexpr EnumName<KvDType> kNames[] = {
      {KvDType::kF32, "f32"}, {KvDType::kBF16, "bf16"}, {KvDType::kInt8, "int8"}};
  return kNames;
}

// Bytes of one page element (the scales of int8 not included).
std::size_t kv_dtype_size(KvDType t);

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;           // token slots per block
  KvDType dtype = KvDType::kF32;  // element type of the pages (host: any; device pages: the backend's)
  // The pages live in a device backend's memory (Backend::kv_layout says so): the host holds
  // no data, and copy lists are queued for that backend instead of run here.
  bool device_pages = false;

  int kv_dim() const { return num_kv_heads * head_dim; }
  // Bytes of one block, every layer, keys and values, int8 scales included.
  std::size_t block_bytes() const;
};

// What a device backend keeps of a PageStorage with device_pages (its device allocation),
// owned by the storage so that it lives exactly as long as the cache.
class DevicePages {
 public:
  virtual ~DevicePages() = default;
};

class PageStorage {
 public:
  // Zeroed pages for `num_blocks` blocks. Throws SpeculaError for a non-positive size or a
  // dtype device pages do not hold (F32 or BF16).
  PageStorage(KvLayout layout, int num_blocks);

  const KvLayout& layout() const { return layout_; }
  int num_blocks() const { return num_blocks_; }
  // Elements from one block to the next inside a layer (2 * block_size * kv_dim), and from a
  // block's keys to its values (block_size * kv_dim). Element offset o of a layer's int8 page
  // has its scale at o / head_dim of the layer's scales (the scales array is the page array
  // with each head's head_dim elements replaced by one float).
  std::size_t block_stride() const { return 2 * value_offset_; }
  std::size_t value_offset() const { return value_offset_; }

  // Layer l's pages: in/out [num_blocks, 2, block_size, kv_dim] elements of layout().dtype
  // (host pages only); scales: [num_blocks, 2, block_size, num_kv_heads] for int8, else null.
  const void* layer_data(int l) const { return layers_[static_cast<std::size_t>(l)].data(); }
  const float* layer_scales(int l) const;
  // F32 pages only: layer l's pages as floats, and the [kv_dim] key (kv = 0) or value (kv = 1)
  // row of physical slot (block * block_size + row).
  float* layer(int l);
  const float* layer(int l) const { return const_cast<PageStorage*>(this)->layer(l); }
  float* row(int l, int kv, int slot);
  const float* row(int l, int kv, int slot) const { return const_cast<PageStorage*>(this)->row(l, kv, slot); }

  // Writes the [kv_dim] row `src` at (l, kv, slot), rounded to the dtype (int8: each head's
  // scale computed from its own values, so a row's stored form depends on that row alone).
  void write_row(int l, int kv, int slot, const float* src);
  // The row as the kernels read it (dequantised): out [kv_dim].
  void read_row(int l, int kv, int slot, float* out) const;

  // Runs the copies in order, every layer, keys and values (and their scales); with device
  // pages, queues them for the backend (take_device_copies) in the same order.
  void execute(std::span<const KvCopy> copies);

  // Device pages: the copies queued since the last call, in order (the backend runs them
  // before the batch it is given), and the backend's allocation (null until its first forward).
  std::vector<KvCopy> take_device_copies() { return std::exchange(device_copies_, {}); }
  std::unique_ptr<DevicePages>& device_state() { return device_state_; }

 private:
  std::size_t row_offset(int kv, int slot) const;  // element offset of (kv, slot) inside a layer

  KvLayout layout_;
  int num_blocks_;
  std::size_t value_offset_;
  std::size_t elem_;  // kv_dtype_size(layout.dtype)
  // [num_layers][num_blocks * block_stride * elem_] bytes, float-aligned; empty with device pages
  std::vector<ZeroedFloats> layers_;
  std::vector<ZeroedFloats> scales_;  // int8: [num_layers][num_blocks * block_stride / head_dim]
  std::vector<KvCopy> device_copies_;        // device pages: copies not yet run, in order
  std::unique_ptr<DevicePages> device_state_;
};

}  // namespace specula
