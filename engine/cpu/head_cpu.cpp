#include "engine/cpu/head_cpu.h"

#include <algorithm>

#include "base/error.h"

namespace specula::cpu {

namespace {

std::vector<float> f32_or_empty(const TensorView* t) { return t ? tensor_f32(*t) : std::vector<float>(); }

}  // namespace

HeadCpuBackend::HeadCpuBackend(const HeadModel& head, const Model& target, MatmulIsa isa)
    : HeadBackend(head),
      isa_(isa),
      embed_(head.embed_tokens() ? *head.embed_tokens() : target.embed_tokens()),
      fc_(head.fc(), isa, std::nullopt),
      q_(*head.layer().q, isa, std::nullopt),
      k_(*head.layer().k, isa, std::nullopt),
      v_(*head.layer().v, isa, std::nullopt),
      o_(*head.layer().o, isa, std::nullopt),
      gate_(*head.layer().gate, isa, std::nullopt),
      up_(*head.layer().up, isa, std::nullopt),
      down_(*head.layer().down, isa, std::nullopt),
      lm_head_(head.lm_head() ? *head.lm_head() : target.lm_head(), isa, std::nullopt),
      input_norm_(f32_or_empty(head.layer().attn_norm)),
      hidden_norm_(f32_or_empty(head.hidden_norm())),
      post_norm_(tensor_f32(*head.layer().mlp_norm)),
      final_norm_(tensor_f32(head.final_norm() ? *head.final_norm() : target.final_norm())),
      fc_bias_(f32_or_empty(head.fc_bias())),
      final_norm_eps_(head.final_norm() ? head.config().layer.rms_norm_eps : target.config().rms_norm_eps),
      rope_(head.config().layer.head_dim(), head.config().layer.rope_theta, head.config().layer.rope_scaling) {
  const HeadConfig& c = head.config();
  SPECULA_CHECK(embed_.shape == std::vector<int64_t>({c.layer.vocab_size, c.hidden_size()}), embed_.origin,
                ": the embedding '", embed_.name, "' is not [vocab_size ", c.layer.vocab_size, ", hidden_size ",
                c.hidden_size(), "] of the head in ", head.dir());
  const TensorView& lm_head = head.lm_head() ? *head.lm_head() : target.lm_head();
  SPECULA_CHECK(lm_head.shape == std::vector<int64_t>({c.draft_vocab_size, c.hidden_size()}), lm_head.origin,
                ": the lm_head '", lm_head.name, "' is not [draft_vocab_size ", c.draft_vocab_size, ", hidden_size ",
                c.hidden_size(), "] of the head in ", head.dir());
  SPECULA_CHECK(static_cast<int>(final_norm_.size()) == c.hidden_size(), "the final norm of ", head.dir(),
                " (or its target's) has ", final_norm_.size(), " weights, not hidden_size ", c.hidden_size());
}

void HeadCpuBackend::project(std::span<const float> taps, std::span<float> x, int n, Workspace&) const {
  const HeadConfig& c = config();
  const std::size_t in = static_cast<std::size_t>(c.num_taps()) * c.target_hidden_size;
  SPECULA_CHECK(n > 0 && taps.size() == static_cast<std::size_t>(n) * in &&
                    x.size() == static_cast<std::size_t>(n) * c.hidden_size(),
                "project: ", n, " rows need taps of ", static_cast<std::size_t>(n) * in, " floats and x of ",
                static_cast<std::size_t>(n) * c.hidden_size(), ", got ", taps.size(), " and ", x.size());
  if (eagle1()) {  // the feature: the target's last hidden state after the target's final norm
    rms_norm(taps.data(), final_norm_.data(), final_norm_eps_, x.data(), n, c.hidden_size());
  } else {
    fc_.product(taps.data(), x.data(), n);
  }
}

void HeadCpuBackend::forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
                             std::span<const float> x, std::span<float> logits, std::span<float> out) const {
  auto* ws = dynamic_cast<HeadCpuWorkspace*>(&workspace);
  SPECULA_CHECK(ws != nullptr, "head forward: the workspace was not made by the CPU head backend");
  HeadCpuWorkspace& s = *ws;
  const HeadConfig& c = config();
  const ModelConfig& l = c.layer;
  const int n = batch.num_rows(), num_logits = batch.num_logits();
  const int hidden = l.hidden_size, q_dim = l.q_dim(), kv_dim = l.kv_dim(), ffn = l.intermediate_size;
  const std::size_t rows = static_cast<std::size_t>(n), width = static_cast<std::size_t>(hidden);
  SPECULA_CHECK(n > 0 && static_cast<int>(plan.row_slots.size()) == n, "head forward: the plan has ",
                plan.row_slots.size(), " new slots for ", n, " rows");
  SPECULA_CHECK(x.size() == rows * width && out.size() == rows * width, "head forward: x and out hold ", x.size(),
                " and ", out.size(), " floats, need ", rows * width);
  SPECULA_CHECK(logits.size() == static_cast<std::size_t>(num_logits) * c.draft_vocab_size,
                "head forward: logits buffer holds ", logits.size(), " floats, need ",
                static_cast<std::size_t>(num_logits) * c.draft_vocab_size);
  SPECULA_CHECK(pages.layout().kv_dim() == kv_dim && pages.layout().num_layers == 1 && !pages.layout().device_pages,
                "head forward: the KV pages do not have the head's host layout (HeadBackend::kv_layout)");

  s.a.resize(rows * 2 * width);
  s.h.resize(rows * width);
  s.q.resize(rows * q_dim);
  s.k.resize(rows * kv_dim);
  s.v.resize(rows * kv_dim);
  s.attn.resize(rows * q_dim);
  s.gate.resize(rows * ffn);
  s.up.resize(rows * ffn);
  const float eps = l.rms_norm_eps;

  // EAGLE-3: a = cat(input_layernorm(embedding), hidden_norm(x)), the attention's input; the
  // residual (in out) is x or hidden_norm(x). EAGLE-1: a = cat(embedding, x); the residual
  // fc(a) + bias is also the attention's input.
  for (std::size_t i = 0; i < rows; ++i) {
    float* a = &s.a[i * 2 * width];
    weight_row(embed_, batch.tokens[i], a);
    if (eagle1()) {
      std::copy_n(&x[i * width], width, a + width);
      continue;
    }
    rms_norm(a, input_norm_.data(), eps, a, 1, hidden);
    rms_norm(&x[i * width], hidden_norm_.data(), eps, a + width, 1, hidden);
    std::copy_n(c.norm_before_residual ? a + width : &x[i * width], width, &out[i * width]);
  }
  if (eagle1()) {
    fc_.product(s.a.data(), out.data(), n);  // every x row is read into a before out is written
    add_bias(out.data(), fc_bias_.data(), n, hidden);
  }
  const float* attention_input = eagle1() ? out.data() : s.a.data();
  q_.product(attention_input, s.q.data(), n);
  k_.product(attention_input, s.k.data(), n);
  v_.product(attention_input, s.v.data(), n);
  for (int i = 0; i < n; ++i) {
    rope_.apply(&s.q[i * std::size_t(q_dim)], l.num_attention_heads, batch.positions[i]);
    rope_.apply(&s.k[i * std::size_t(kv_dim)], l.num_key_value_heads, batch.positions[i]);
    pages.write_row(0, 0, plan.row_slots[i], &s.k[i * std::size_t(kv_dim)]);
    pages.write_row(0, 1, plan.row_slots[i], &s.v[i * std::size_t(kv_dim)]);
  }
  const AttentionShape shape{l.num_attention_heads, l.num_key_value_heads, l.head_dim(), 0};
  attend_batch(isa_, batch, plan, pages, 0, shape, s.q.data(), s.attn.data(), s.attention);
  o_.product(s.attn.data(), s.h.data(), n);
  add_inplace(out.data(), s.h.data(), static_cast<int64_t>(rows * width));

  rms_norm(out.data(), post_norm_.data(), eps, s.h.data(), n, hidden);
  gate_.product(s.h.data(), s.gate.data(), n);
  up_.product(s.h.data(), s.up.data(), n);
  silu_mul(s.gate.data(), s.up.data(), static_cast<int64_t>(rows) * ffn);
  down_.product(s.gate.data(), s.h.data(), n);
  add_inplace(out.data(), s.h.data(), static_cast<int64_t>(rows * width));
  if (num_logits == 0) return;

  // The rows that want logits side by side (EAGLE-3: normalised by the head's final norm),
  // then one product with lm_head.
  s.last.resize(static_cast<std::size_t>(num_logits) * width);
  for (int i = 0; i < num_logits; ++i)
    std::copy_n(&out[static_cast<std::size_t>(batch.logit_rows[i]) * width], width, &s.last[i * width]);
  if (!eagle1()) rms_norm(s.last.data(), final_norm_.data(), eps, s.last.data(), num_logits, hidden);
  lm_head_.product(s.last.data(), logits.data(), num_logits);
}

}  // namespace specula::cpu
