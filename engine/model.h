// defines: Model, a LLaMA-family checkpoint (config, memory-mapped weights packed at load for
// the matrix product, tokenizer) and
// its CPU forward pass over the paged KV cache; ForwardBatch, the one input shape that
// serves prefill, decode and tree verification.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cpu/packed_weights.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"
#include "engine/tokenizer.h"
#include "kv/paged_kv_cache.h"

namespace specula {

// n new tokens appended to a sequence that already holds C cached slots.
// Token i is written to cache slot C + i. What it attends to:
//   parents empty: a causal chain (prefill, decode): every cached slot and batch tokens 0..i.
//   parents non-empty: the batch is the last n nodes of a token tree whose parent array is
//     `parents` ([T + n]: T earlier nodes already cached, in the last T slots, node t at
//     slot tree_start + t with tree_start = C - T). Node t sees the prefix [0, tree_start),
//     its ancestors and itself; parents[t] = -1 marks a child of the prefix, otherwise
//     parents[t] < t (topological order). A one-shot tree verify has T = 0; a draft that
//     grows its tree level by level passes the whole parent array each time.
struct ForwardBatch {
  std::span<const int> tokens;     // in [n]
  std::span<const int> positions;  // in [n] RoPE positions (prefix length + depth - 1 for tree nodes)
  std::span<const int> parents;    // in [T + n] or empty
  bool all_logits = true;          // false: only the last row's logits are computed
};

class Model {
 public:
  // Loads config.json, the safetensors weights and tokenizer.model from `dir`, validating
  // every tensor the config implies. Throws SpeculaError naming the file and tensor.
  // matrices_as: the dtype the matrix products read (see PackedWeights); default as stored.
  explicit Model(const std::string& dir, std::optional<DType> matrices_as = std::nullopt);

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& dir() const { return dir_; }
  // Bytes of weights one decode step reads (every matrix once).
  std::size_t weight_bytes() const { return weight_bytes_; }

  // The cache layout this model needs.
  KvLayout kv_layout(int block_size) const { return {config_.num_hidden_layers, config_.kv_dim(), block_size}; }

  // Runs the batch, appending its n slots to `seq` in `cache`.
  // logits: out [n, vocab] (all_logits) or [1, vocab] (last row only).
  void forward(PagedKvCache& cache, PagedKvCache::SeqId seq, const ForwardBatch& batch, std::span<float> logits);

 private:
  struct Layer {
    cpu::PackedWeights q, k, v, o, gate, up, down;
    std::vector<float> attn_norm, mlp_norm;  // [hidden] f32 copies
  };

  // Attention of the batch rows; the batch occupies slots [first_slot, first_slot + n).
  void attention(PagedKvCache& cache, PagedKvCache::SeqId seq, int layer, int n, int prefix_len, int first_slot);

  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const TensorView* embed_ = nullptr;  // rows looked up in the mapped checkpoint
  std::vector<Layer> layers_;
  std::unique_ptr<cpu::PackedWeights> lm_head_;  // the embedding again when tied
  std::vector<float> final_norm_;
  cpu::RopeTable rope_;
  std::size_t weight_bytes_ = 0;

  // One attention work item's key/value rows (gathered from the cache) and scores.
  struct Gathered {
    std::vector<const float*> keys, values;
    std::vector<float> scores;
  };

  // Scratch, resized per batch (a Model serves one forward at a time).
  struct Scratch {
    Gathered gathered;  // the one-thread attention's (each OpenMP thread has its own)
    std::vector<const float*> key_rows, value_rows;  // [cached slots] one layer's cache rows
    std::vector<float> x, h, q, k, v, attn, gate, up;
    std::vector<int> visible;          // slots after the prefix each row sees, flattened, ascending
    std::vector<int> visible_offsets;  // [n + 1] row i's entries are visible[offsets[i], offsets[i+1])
  } s_;
};

}  // namespace specula
