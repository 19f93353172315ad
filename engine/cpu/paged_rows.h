// defines: PagedRows, the keys (or values) one attention row reads, addressed through its
// sequence's page list (no per-key pointer array), in the pages' element type (f32, bf16 or
// int8 with per-(slot, head) scales, kv/page_storage.h), and PagedRowCursor, which walks them in
// key order without a division per key.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kv/page_storage.h"

namespace specula::cpu {

// The full list: entry e is slot e of the sequence for e < prefix_len, else slot
// extra_slots[e - prefix_len]; key j is entry first + j (a sliding window hides the first
// entries, the oldest positions);
// slot s lives in block pages[s / block_size], row s % block_size, of one layer's pages
// ([num_blocks, 2, block_size, kv_dim], kv/page_storage.h); `plane` points at the keys
// (offset 0) or the values (offset block_size * kv_dim) of block 0. Offsets below count
// elements of `dtype` from `plane`; an int8 element at offset o has its scale at
// scales[o / head_dim].
struct PagedRows {
  const void* plane = nullptr;    // in: block 0's keys or values of one layer, elements of dtype
  std::size_t block_stride = 0;   // elements from one block to the next
  int kv_dim = 0;                 // elements from one slot to the next
  int block_size = 0;
  const int* pages = nullptr;     // in [ceil(slots / block_size)] the sequence's block ids
  int prefix_len = 0;             // keys [0, prefix_len) are slots [0, prefix_len)
  const int* extra_slots = nullptr;  // in [num_extra] slots after the prefix, ascending
  int num_extra = 0;
  int first = 0;                  // entries [0, first) are not seen
  KvDType dtype = KvDType::kF32;
  const float* scales = nullptr;  // int8: in, the scales of `plane` (same offsets / head_dim)
  int head_dim = 0;               // int8: elements per scale

  int num_keys() const { return prefix_len + num_extra - first; }
  std::size_t slot_offset(int slot) const {
    return static_cast<std::size_t>(pages[slot / block_size]) * block_stride +
           static_cast<std::size_t>(slot % block_size) * static_cast<std::size_t>(kv_dim);
  }
  std::size_t key_offset(int j) const {
    const int e = first + j;
    return slot_offset(e < prefix_len ? e : extra_slots[e - prefix_len]);
  }
  // F32 pages: key j's row.
  const float* key_row(int j) const {
    assert(dtype == KvDType::kF32);
    return static_cast<const float*>(plane) + key_offset(j);
  }
  // Element i of key j's row as the kernels read it (dequantised).
  float element(int j, int i) const {
    const std::size_t o = key_offset(j) + static_cast<std::size_t>(i);
    if (dtype == KvDType::kF32) return static_cast<const float*>(plane)[o];
    if (dtype == KvDType::kBF16) {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(plane)[o]) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    return scales[o / static_cast<std::size_t>(head_dim)] * static_cast<float>(static_cast<const int8_t*>(plane)[o]);
  }
};

// Rows 0, 1, 2, ... of a PagedRows in order (element offsets from its plane): the prefix page
// by page from `first`, then the extra slots.
class PagedRowCursor {
 public:
  explicit PagedRowCursor(const PagedRows& rows)
      : rows_(rows), j_(rows.first), page_index_(rows.first / rows.block_size), in_page_(rows.first % rows.block_size) {
    if (j_ < rows_.prefix_len) page_ = static_cast<std::size_t>(rows_.pages[page_index_]) * rows_.block_stride;
  }
  std::size_t next() {
    std::size_t row;
    if (j_ < rows_.prefix_len) {
      if (in_page_ == 0) page_ = static_cast<std::size_t>(rows_.pages[page_index_]) * rows_.block_stride;
      row = page_ + static_cast<std::size_t>(in_page_) * static_cast<std::size_t>(rows_.kv_dim);
      if (++in_page_ == rows_.block_size) {
        in_page_ = 0;
        ++page_index_;
      }
    } else {
      row = rows_.slot_offset(rows_.extra_slots[j_ - rows_.prefix_len]);
    }
    ++j_;
    return row;
  }

 private:
  const PagedRows& rows_;
  int j_, page_index_, in_page_;  // j_: the entry next() returns
  std::size_t page_ = 0;          // element offset of the current page
};

}  // namespace specula::cpu
