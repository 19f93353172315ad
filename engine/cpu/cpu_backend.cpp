#include "engine/cpu/cpu_backend.h"

#include <algorithm>

#include "base/error.h"

namespace specula::cpu {
namespace {

// An optional tensor's f32 copy; empty when the model has none.
std::vector<float> optional_f32(const TensorView* t) { return t ? tensor_f32(*t) : std::vector<float>{}; }

// y = x W^T (+ bias when the model has one).  x: in [n, in]; y: out [n, out]
void project(const float* x, const WeightMatrix& w, const std::vector<float>& bias, float* y, int n) {
  w.product(x, y, n);
  if (!bias.empty()) add_bias(y, bias.data(), n, static_cast<int>(bias.size()));
}

// Copies the rows of `x` that `taps` asks for at layer `layer` into its buffer.
//   x: in [num_rows, hidden]
void copy_taps(const StateTaps& taps, int layer, const float* x, int hidden) {
  const std::size_t width = static_cast<std::size_t>(hidden);
  for (std::size_t j = 0; j < taps.layers.size(); ++j) {
    if (taps.layers[j] != layer) continue;
    for (std::size_t i = 0; i < taps.rows.size(); ++i)
      std::copy_n(x + static_cast<std::size_t>(taps.rows[i]) * width, width,
                  taps.out.data() + (i * taps.layers.size() + j) * width);
  }
}

}  // namespace

CpuBackend::CpuBackend(const Model& model, std::optional<MatrixFormat> matrices_as, MatmulIsa isa)
    : Backend(model),
      isa_(isa),
      rope_(model.config().head_dim(), model.config().rope_theta, model.config().rope_scaling) {
  SPECULA_CHECK(matrices_as != MatrixFormat::kBF16Amx || bf16amx_unsupported().empty(), "bf16amx weights: ",
                bf16amx_unsupported());
  // Each matrix is packed from the mapping once; a decode step reads every one once.
  const auto pack = [&](const TensorView& w) {
    WeightMatrix packed(w, isa, matrices_as);
    weight_bytes_ += packed.bytes();
    return packed;
  };
  for (const LayerWeights& l : model.layers()) {
    layers_.push_back(Layer{pack(*l.q), pack(*l.k), pack(*l.v), pack(*l.o), pack(*l.gate), pack(*l.up), pack(*l.down),
                            tensor_f32(*l.attn_norm), tensor_f32(*l.mlp_norm), optional_f32(l.q_bias), optional_f32(l.k_bias),
                            optional_f32(l.v_bias), optional_f32(l.o_bias), optional_f32(l.gate_bias), optional_f32(l.up_bias),
                            optional_f32(l.down_bias), optional_f32(l.q_norm), optional_f32(l.k_norm)});
  }
  final_norm_ = tensor_f32(model.final_norm());
  lm_head_ = std::make_unique<WeightMatrix>(pack(model.lm_head()));
}

void CpuBackend::forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
                         std::span<float> logits, const StateTaps& taps) const {
  auto* ws = dynamic_cast<CpuWorkspace*>(&workspace);
  SPECULA_CHECK(ws != nullptr, "forward: the workspace was not made by the CPU backend");
  CpuWorkspace& s = *ws;
  const ModelConfig& c = config();
  const int n = batch.num_rows();
  const int hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.intermediate_size;
  const int vocab = c.vocab_size, head_dim = c.head_dim();
  const int num_logits = batch.num_logits();
  SPECULA_CHECK(n > 0 && static_cast<int>(plan.row_slots.size()) == n, "forward: the plan has ", plan.row_slots.size(),
                " new slots for ", n, " rows");
  SPECULA_CHECK(logits.size() == static_cast<std::size_t>(num_logits) * vocab, "forward: logits buffer holds ",
                logits.size(), " floats, need ", static_cast<std::size_t>(num_logits) * vocab);
  SPECULA_CHECK(pages.layout().kv_dim() == kv_dim && pages.layout().num_layers == c.num_hidden_layers &&
                    !pages.layout().device_pages,
                "forward: the KV pages do not have this model's host layout (Backend::kv_layout)");
  check_taps(taps, batch, c);

  const std::size_t rows = static_cast<std::size_t>(n);
  s.x.resize(rows * hidden);
  s.h.resize(rows * hidden);
  s.q.resize(rows * q_dim);
  s.k.resize(rows * kv_dim);
  s.v.resize(rows * kv_dim);
  s.attn.resize(rows * q_dim);
  s.gate.resize(rows * ffn);
  s.up.resize(rows * ffn);
  const AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, head_dim, c.sliding_window};

  for (int i = 0; i < n; ++i) weight_row(model().embed_tokens(), batch.tokens[i], &s.x[i * std::size_t(hidden)]);

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& layer = layers_[static_cast<std::size_t>(l)];
    copy_taps(taps, l, s.x.data(), hidden);
    rms_norm(s.x.data(), layer.attn_norm.data(), c.rms_norm_eps, s.h.data(), n, hidden);
    project(s.h.data(), layer.q, layer.q_bias, s.q.data(), n);
    project(s.h.data(), layer.k, layer.k_bias, s.k.data(), n);
    project(s.h.data(), layer.v, layer.v_bias, s.v.data(), n);
    if (!layer.q_norm.empty()) {  // Qwen3: each head normalised before RoPE
      rms_norm(s.q.data(), layer.q_norm.data(), c.rms_norm_eps, s.q.data(), n * c.num_attention_heads, head_dim);
      rms_norm(s.k.data(), layer.k_norm.data(), c.rms_norm_eps, s.k.data(), n * c.num_key_value_heads, head_dim);
    }
    for (int i = 0; i < n; ++i) {
      rope_.apply(&s.q[i * std::size_t(q_dim)], c.num_attention_heads, batch.positions[i]);
      rope_.apply(&s.k[i * std::size_t(kv_dim)], c.num_key_value_heads, batch.positions[i]);
      pages.write_row(l, 0, plan.row_slots[i], &s.k[i * std::size_t(kv_dim)]);
      pages.write_row(l, 1, plan.row_slots[i], &s.v[i * std::size_t(kv_dim)]);
    }
    attend_batch(isa_, batch, plan, pages, l, shape, s.q.data(), s.attn.data(), s.attention);
    project(s.attn.data(), layer.o, layer.o_bias, s.h.data(), n);
    add_inplace(s.x.data(), s.h.data(), static_cast<int64_t>(rows) * hidden);

    rms_norm(s.x.data(), layer.mlp_norm.data(), c.rms_norm_eps, s.h.data(), n, hidden);
    project(s.h.data(), layer.gate, layer.gate_bias, s.gate.data(), n);
    project(s.h.data(), layer.up, layer.up_bias, s.up.data(), n);
    silu_mul(s.gate.data(), s.up.data(), static_cast<int64_t>(rows) * ffn);
    project(s.gate.data(), layer.down, layer.down_bias, s.h.data(), n);
    add_inplace(s.x.data(), s.h.data(), static_cast<int64_t>(rows) * hidden);
  }
  copy_taps(taps, c.num_hidden_layers, s.x.data(), hidden);
  if (num_logits == 0) return;

  // The rows that want logits, normalised side by side, then one product with the head.
  s.last.resize(static_cast<std::size_t>(num_logits) * hidden);
  for (int i = 0; i < num_logits; ++i)
    std::copy_n(&s.x[static_cast<std::size_t>(batch.logit_rows[i]) * hidden], hidden, &s.last[i * std::size_t(hidden)]);
  rms_norm(s.last.data(), final_norm_.data(), c.rms_norm_eps, s.last.data(), num_logits, hidden);
  lm_head_->product(s.last.data(), logits.data(), num_logits);
}

}  // namespace specula::cpu
