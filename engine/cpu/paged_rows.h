// defines: PagedRows, the keys (or values) one attention row reads, addressed through its
// sequence's page list (no per-key pointer array), and PagedRowCursor, which walks them in
// key order without a division per key.
#pragma once

#include <cstddef>

namespace specula::cpu {

// The full list: entry e is slot e of the sequence for e < prefix_len, else slot
// extra_slots[e - prefix_len]; key j is entry first + j (a sliding window hides the first
// entries, the oldest positions);
// slot s lives in block pages[s / block_size], row s % block_size, of one layer's pages
// ([num_blocks, 2, block_size, kv_dim], kv/page_storage.h); `plane` points at the keys
// (offset 0) or the values (offset block_size * kv_dim) of block 0.
struct PagedRows {
  const float* plane = nullptr;   // in: block 0's keys or values of one layer
  std::size_t block_stride = 0;   // floats from one block to the next
  int kv_dim = 0;                 // floats from one slot to the next
  int block_size = 0;
  const int* pages = nullptr;     // in [ceil(slots / block_size)] the sequence's block ids
  int prefix_len = 0;             // keys [0, prefix_len) are slots [0, prefix_len)
  const int* extra_slots = nullptr;  // in [num_extra] slots after the prefix, ascending
  int num_extra = 0;
  int first = 0;                  // entries [0, first) are not seen

  int num_keys() const { return prefix_len + num_extra - first; }
  const float* slot_row(int slot) const {
    return plane + static_cast<std::size_t>(pages[slot / block_size]) * block_stride +
           static_cast<std::size_t>(slot % block_size) * static_cast<std::size_t>(kv_dim);
  }
  const float* key_row(int j) const {
    const int e = first + j;
    return slot_row(e < prefix_len ? e : extra_slots[e - prefix_len]);
  }
};

// Rows 0, 1, 2, ... of a PagedRows in order: the prefix page by page from `first`, then the
// extra slots.
class PagedRowCursor {
 public:
  explicit PagedRowCursor(const PagedRows& rows)
      : rows_(rows), j_(rows.first), page_index_(rows.first / rows.block_size), in_page_(rows.first % rows.block_size) {
    if (j_ < rows_.prefix_len)
      page_ = rows_.plane + static_cast<std::size_t>(rows_.pages[page_index_]) * rows_.block_stride;
  }
  const float* next() {
    const float* row;
    if (j_ < rows_.prefix_len) {
      if (in_page_ == 0) page_ = rows_.plane + static_cast<std::size_t>(rows_.pages[page_index_]) * rows_.block_stride;
      row = page_ + static_cast<std::size_t>(in_page_) * static_cast<std::size_t>(rows_.kv_dim);
      if (++in_page_ == rows_.block_size) {
        in_page_ = 0;
        ++page_index_;
      }
    } else {
      row = rows_.slot_row(rows_.extra_slots[j_ - rows_.prefix_len]);
    }
    ++j_;
    return row;
  }

 private:
  const PagedRows& rows_;
  int j_, page_index_, in_page_;  // j_: the entry next() returns
  const float* page_ = nullptr;
};

}  // namespace specula::cpu
