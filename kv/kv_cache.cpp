#include "kv/kv_cache.h"

#include "base/error.h"

namespace specula {

KvCache::KvCache(KvLayout layout, int num_blocks)
    : tables_(num_blocks, layout.block_size), storage_(layout, num_blocks) {}

void KvCache::run_pending() {
  storage_.execute(pending_);
  pending_.clear();
}

KvPlan KvCache::prepare(std::span<const SeqId> seqs, std::span<const int> counts) {
  KvPlan plan = tables_.append(seqs, counts, pending_);  // throws with nothing changed
  run_pending();
  return plan;
}

void KvCache::append_slots(SeqId seq, int n) { prepare(std::span(&seq, 1), std::span(&n, 1)); }

float* KvCache::row(SeqId seq, int layer, int slot, int kv) {
  SPECULA_CHECK(slot >= 0 && slot < length(seq) && layer >= 0 && layer < layout().num_layers, "kv cache: slot ", slot,
                " of layer ", layer, " is outside sequence ", seq);
  SPECULA_CHECK(!layout().device_pages, "kv cache: the pages live in device memory; the host cannot read slot ", slot,
                " of sequence ", seq);
  SPECULA_CHECK(layout().dtype == KvDType::kF32, "kv cache: key() / value() address f32 rows; the pages are ",
                name_of(layout().dtype), " (PageStorage::write_row rounds a row into them)");
  run_pending();
  const int bs = layout().block_size;
  return storage_.row(layer, kv, block_table(seq)[static_cast<std::size_t>(slot / bs)] * bs + slot % bs);
}

}  // namespace specula
