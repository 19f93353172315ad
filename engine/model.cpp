#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/threads.h"
#include "engine/error.h"

namespace specula {
namespace {

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  cpu::weight_row(TensorView{t.name, t.dtype, {1, t.numel()}, t.data, t.origin}, 0, out.data());
  return out;
}

}  // namespace

Model::Model(const std::string& dir, std::optional<DType> matrices_as)
    : dir_(dir),
      config_(load_model_config((std::filesystem::path(dir) / "config.json").string())),
      checkpoint_(std::make_unique<Checkpoint>(dir)),
      tokenizer_(std::make_unique<Tokenizer>((std::filesystem::path(dir) / "tokenizer.model").string(),
                                             config_.vocab_size)),
      rope_(config_.head_dim(), config_.rope_theta) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size, kv = c.kv_dim(), vocab = c.vocab_size;
  const Checkpoint& ck = *checkpoint_;
  const cpu::MatmulIsa isa = cpu::matmul_isa();
  // Each matrix is packed from the mapping once; a decode step reads every one once.
  const auto pack = [&](const std::string& name, std::vector<int64_t> shape) {
    cpu::PackedWeights packed(ck.get(name, std::move(shape)), isa, matrices_as);
    weight_bytes_ += static_cast<std::size_t>(packed.out() * packed.in()) * dtype_size(packed.dtype());
    return packed;
  };
  embed_ = &ck.get("model.embed_tokens.weight", {vocab, hidden});
  final_norm_ = to_f32(ck.get("model.norm.weight", {hidden}));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layers_.push_back(Layer{pack(p + "self_attn.q_proj.weight", {hidden, hidden}),
                            pack(p + "self_attn.k_proj.weight", {kv, hidden}),
                            pack(p + "self_attn.v_proj.weight", {kv, hidden}),
                            pack(p + "self_attn.o_proj.weight", {hidden, hidden}),
                            pack(p + "mlp.gate_proj.weight", {ffn, hidden}),
                            pack(p + "mlp.up_proj.weight", {ffn, hidden}),
                            pack(p + "mlp.down_proj.weight", {hidden, ffn}),
                            to_f32(ck.get(p + "input_layernorm.weight", {hidden})),
                            to_f32(ck.get(p + "post_attention_layernorm.weight", {hidden}))});
  }
  lm_head_ = std::make_unique<cpu::PackedWeights>(
      pack(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", {vocab, hidden}));
}

void Model::forward(PagedKvCache& cache, PagedKvCache::SeqId seq, const ForwardBatch& batch,
                    std::span<float> logits) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(batch.tokens.size());
  const int hidden = c.hidden_size, kv_dim = c.kv_dim(), ffn = c.intermediate_size, vocab = c.vocab_size;
  SPECULA_CHECK(n > 0, "forward: empty batch");
  SPECULA_CHECK(batch.positions.size() == batch.tokens.size(), "forward: ", batch.positions.size(),
                " positions for ", n, " tokens");
  const int earlier_nodes = batch.parents.empty() ? 0 : static_cast<int>(batch.parents.size()) - n;
  SPECULA_CHECK(earlier_nodes >= 0, "forward: ", batch.parents.size(), " parents for a batch of ", n, " tokens");
  const std::size_t logit_rows = batch.all_logits ? static_cast<std::size_t>(n) : 1;
  SPECULA_CHECK(logits.size() == logit_rows * vocab, "forward: logits buffer holds ", logits.size(),
                " floats, need ", logit_rows * vocab);
  for (int i = 0; i < n; ++i) {
    SPECULA_CHECK(batch.tokens[i] >= 0 && batch.tokens[i] < vocab, "forward: token id ", batch.tokens[i],
                  " is outside the vocabulary [0, ", vocab, ")");
    SPECULA_CHECK(batch.positions[i] >= 0 && batch.positions[i] < c.max_position_embeddings, "forward: position ",
                  batch.positions[i], " is outside [0, max_position_embeddings = ", c.max_position_embeddings, ")");
  }
  for (std::size_t t = 0; t < batch.parents.size(); ++t) {
    SPECULA_CHECK(batch.parents[t] >= -1 && batch.parents[t] < static_cast<int>(t), "forward: parent of tree node ",
                  t, " must precede it (topological order)");
  }

  const int first_slot = cache.length(seq);
  const int tree_start = first_slot - earlier_nodes;
  SPECULA_CHECK(tree_start >= 0, "forward: ", earlier_nodes, " earlier tree nodes but only ", first_slot,
                " cached slots");
  const int prefix_len = batch.parents.empty() ? first_slot : tree_start;
  cache.append_slots(seq, n);  // throws ResourceExhausted with seq unchanged

  // What each row sees after the prefix, as slot offsets from prefix_len, ascending
  // (= position order, since ancestors precede their descendants).
  s_.visible.clear();
  s_.visible_offsets.assign(1, 0);
  for (int i = 0; i < n; ++i) {
    const std::size_t start = s_.visible.size();
    if (batch.parents.empty()) {
      for (int j = 0; j <= i; ++j) s_.visible.push_back(j);
    } else {
      for (int t = earlier_nodes + i; t >= 0; t = batch.parents[t]) s_.visible.push_back(t);
      std::reverse(s_.visible.begin() + static_cast<long>(start), s_.visible.end());
    }
    s_.visible_offsets.push_back(static_cast<int>(s_.visible.size()));
  }

  const std::size_t rows = static_cast<std::size_t>(n);
  s_.x.resize(rows * hidden);
  s_.h.resize(rows * hidden);
  s_.q.resize(rows * hidden);
  s_.k.resize(rows * kv_dim);
  s_.v.resize(rows * kv_dim);
  s_.attn.resize(rows * hidden);
  s_.gate.resize(rows * ffn);
  s_.up.resize(rows * ffn);

  for (int i = 0; i < n; ++i) cpu::weight_row(*embed_, batch.tokens[i], &s_.x[i * std::size_t(hidden)]);

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& layer = layers_[l];
    cpu::rms_norm(s_.x.data(), layer.attn_norm.data(), c.rms_norm_eps, s_.h.data(), n, hidden);
    cpu::matmul(s_.h.data(), layer.q, s_.q.data(), n);
    cpu::matmul(s_.h.data(), layer.k, s_.k.data(), n);
    cpu::matmul(s_.h.data(), layer.v, s_.v.data(), n);
    for (int i = 0; i < n; ++i) {
      rope_.apply(&s_.q[i * std::size_t(hidden)], c.num_attention_heads, batch.positions[i]);
      rope_.apply(&s_.k[i * std::size_t(kv_dim)], c.num_key_value_heads, batch.positions[i]);
      std::copy_n(&s_.k[i * std::size_t(kv_dim)], kv_dim, cache.key(seq, l, first_slot + i));
      std::copy_n(&s_.v[i * std::size_t(kv_dim)], kv_dim, cache.value(seq, l, first_slot + i));
    }
    attention(cache, seq, l, n, prefix_len, first_slot);
    cpu::matmul(s_.attn.data(), layer.o, s_.h.data(), n);
    cpu::add_inplace(s_.x.data(), s_.h.data(), static_cast<int64_t>(rows) * hidden);

    cpu::rms_norm(s_.x.data(), layer.mlp_norm.data(), c.rms_norm_eps, s_.h.data(), n, hidden);
    cpu::matmul(s_.h.data(), layer.gate, s_.gate.data(), n);
    cpu::matmul(s_.h.data(), layer.up, s_.up.data(), n);
    cpu::silu_mul(s_.gate.data(), s_.up.data(), static_cast<int64_t>(rows) * ffn);
    cpu::matmul(s_.gate.data(), layer.down, s_.h.data(), n);
    cpu::add_inplace(s_.x.data(), s_.h.data(), static_cast<int64_t>(rows) * hidden);
  }

  const float* last = s_.x.data() + (batch.all_logits ? 0 : (rows - 1) * hidden);
  cpu::rms_norm(last, final_norm_.data(), c.rms_norm_eps, s_.h.data(), static_cast<int>(logit_rows), hidden);
  cpu::matmul(s_.h.data(), *lm_head_, logits.data(), static_cast<int>(logit_rows));
}

void Model::attention(PagedKvCache& cache, PagedKvCache::SeqId seq, int layer, int n, int prefix_len,
                      int first_slot) {
  const ModelConfig& c = config_;
  const int head_dim = c.head_dim();
  const int group = c.num_attention_heads / c.num_key_value_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  // Row pointers of every slot this batch can see: the prefix, the earlier tree nodes, the batch.
  std::vector<const float*>& key_rows = s_.key_rows;
  std::vector<const float*>& value_rows = s_.value_rows;
  key_rows.resize(static_cast<std::size_t>(first_slot + n));
  value_rows.resize(key_rows.size());
  for (int s = 0; s < first_slot + n; ++s) {
    key_rows[s] = cache.key(seq, layer, s);
    value_rows[s] = cache.value(seq, layer, s);
  }

  // One work item per (row, key/value head): the `group` query heads that share it.
  const int kv_heads = c.num_key_value_heads;
  const auto item = [&](int i, int g, Gathered& t) {
    t.keys.assign(key_rows.begin(), key_rows.begin() + prefix_len);
    t.values.assign(value_rows.begin(), value_rows.begin() + prefix_len);
    for (int v = s_.visible_offsets[i]; v < s_.visible_offsets[i + 1]; ++v) {
      t.keys.push_back(key_rows[prefix_len + s_.visible[v]]);
      t.values.push_back(value_rows[prefix_len + s_.visible[v]]);
    }
    t.scores.resize(t.keys.size() * group);
    const std::size_t row = static_cast<std::size_t>(i) * c.hidden_size + static_cast<std::size_t>(g) * group * head_dim;
    cpu::attend_group(&s_.q[row], group, t.keys.data(), t.values.data(), static_cast<int>(t.keys.size()), g * head_dim,
                      head_dim, scale, t.scores.data(), &s_.attn[row]);
  };
  // One-thread time: ~4 flops per head, key and dimension at ~30 GFLOP/s.
  const double flops = 4.0 * n * c.num_attention_heads * static_cast<double>(first_slot + n) * head_dim;
  if (cpu::worth_threads(flops / 30)) {
#pragma omp parallel
    {
      Gathered t;
#pragma omp for collapse(2) schedule(static)
      for (int i = 0; i < n; ++i)
        for (int g = 0; g < kv_heads; ++g) item(i, g, t);
    }
  } else {
    for (int i = 0; i < n; ++i)
      for (int g = 0; g < kv_heads; ++g) item(i, g, s_.gathered);
  }
}

}  // namespace specula
