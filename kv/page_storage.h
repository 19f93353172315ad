// defines: KvLayout (the shape of a model's cache) and PageStorage, the K/V data of every
// block in host memory, one array per layer laid out [num_blocks, 2 (K, V), block_size,
// num_kv_heads, head_dim] — the layout a paged-attention kernel reads through page lists —
// and the executor of the copy lists block-table operations return; or, for a layout with
// device_pages, the handle of pages a device backend owns (DevicePages) and the queue of
// copies it runs there.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "kv/kv_plan.h"

namespace specula {

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;       // token slots per block
  DType dtype = DType::F32;  // element type of the pages (F32 on the CPU today)
  // The pages live in a device backend's memory (Backend::kv_layout says so): the host holds
  // no data, and copy lists are queued for that backend instead of run here.
  bool device_pages = false;

  int kv_dim() const { return num_kv_heads * head_dim; }
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
  // dtype the host storage does not hold (only F32 today; device pages: F32 or BF16).
  PageStorage(KvLayout layout, int num_blocks);

  const KvLayout& layout() const { return layout_; }
  int num_blocks() const { return num_blocks_; }
  // Floats from one block to the next inside a layer (2 * block_size * kv_dim), and from a
  // block's keys to its values (block_size * kv_dim).
  std::size_t block_stride() const { return 2 * value_offset_; }
  std::size_t value_offset() const { return value_offset_; }

  // Layer l's pages: in/out [num_blocks, 2, block_size, kv_dim] (host pages only).
  float* layer(int l) { return layers_[static_cast<std::size_t>(l)].data(); }
  const float* layer(int l) const { return layers_[static_cast<std::size_t>(l)].data(); }
  // The [kv_dim] key (kv = 0) or value (kv = 1) row of physical slot (block * block_size + row).
  float* row(int l, int kv, int slot);
  const float* row(int l, int kv, int slot) const;

  // Runs the copies in order, every layer, keys and values; with device pages, queues them
  // for the backend (take_device_copies) in the same order.
  void execute(std::span<const KvCopy> copies);

  // Device pages: the copies queued since the last call, in order (the backend runs them
  // before the batch it is given), and the backend's allocation (null until its first forward).
  std::vector<KvCopy> take_device_copies() { return std::exchange(device_copies_, {}); }
  std::unique_ptr<DevicePages>& device_state() { return device_state_; }

 private:
  KvLayout layout_;
  int num_blocks_;
  std::size_t value_offset_;
  std::vector<std::vector<float>> layers_;  // [num_layers][num_blocks * block_stride]; empty with device pages
  std::vector<KvCopy> device_copies_;        // device pages: copies not yet run, in order
  std::unique_ptr<DevicePages> device_state_;
};

}  // namespace specula
