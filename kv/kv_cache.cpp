#include "kv/kv_cache.h"

#include <cstring>

#include "base/error.h"

namespace specula {

KvCache::KvCache(KvLayout layout, int num_blocks)
    : tables_(num_blocks, layout.block_size), storage_(layout, num_blocks) {}

void KvCache::run_pending() {
  storage_.execute(pending_);
  if (state_width_ > 0) {
    const std::size_t width = static_cast<std::size_t>(state_width_);
    const std::size_t slots = static_cast<std::size_t>(layout().block_size);
    for (const KvCopy& c : pending_) {
      const std::size_t rows = c.kind == KvCopy::Kind::kBlock ? slots : 1;
      std::memmove(&states_[static_cast<std::size_t>(c.dst) * rows * width],
                   &states_[static_cast<std::size_t>(c.src) * rows * width], rows * width * sizeof(float));
    }
  }
  pending_.clear();
}

void KvCache::keep_states(std::vector<int> layers, int width) {
  if (state_width_ > 0) {
    SPECULA_CHECK(layers == state_layers_ && width == state_width_, "kv cache: it keeps the states of ",
                  state_layers_.size(), " layers (", state_width_, " floats a slot); another store was asked for (",
                  layers.size(), " layers, ", width, " floats)");
    return;
  }
  SPECULA_CHECK(!layers.empty() && width > 0, "kv cache: a state store needs layers and a width");
  state_layers_ = std::move(layers);
  state_width_ = width;
  states_.assign(static_cast<std::size_t>(tables_.num_blocks()) * layout().block_size * width, 0.0f);
}

std::span<float> KvCache::physical_states(int slot) {
  const std::size_t width = static_cast<std::size_t>(state_width_);
  SPECULA_CHECK(width > 0 && slot >= 0 && static_cast<std::size_t>(slot) * width < states_.size(),
                "kv cache: no states for physical slot ", slot);
  return std::span(states_).subspan(static_cast<std::size_t>(slot) * width, width);
}

std::span<const float> KvCache::states(SeqId seq, int slot) {
  SPECULA_CHECK(slot >= 0 && slot < length(seq), "kv cache: slot ", slot, " is outside sequence ", seq, " (",
                length(seq), " slots)");
  run_pending();
  const int bs = layout().block_size;
  return physical_states(block_table(seq)[static_cast<std::size_t>(slot / bs)] * bs + slot % bs);
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
