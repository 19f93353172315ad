// Each family's forward against a plain float64 reference written from Hugging Face's formulas
// (transformers' models/{llama,mistral,qwen2,qwen3}/modeling_*.py and modeling_rope_utils.py):
// make-checkpoint's small test preset of the family (F32 random weights in a TempDir), a
// prefill, two decode rows and a tree of three nodes, every row's logits within kBound
// (relative to the largest reference logit). Per feature, the reference with the feature
// dropped (biases zeroed, window ignored, RoPE scaling off, q/k norms skipped) is far outside
// the bound, so a forward that dropped it would fail.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "model/checkpoint_writer.h"
#include "engine/cpu/matmul.h"
#include "model/model.h"
#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

using Matrix = std::vector<double>;  // row-major

constexpr double kBound = 1e-4;  // F32 weights: relative error of the logits

struct Drop {
  bool biases = false, window = false, scaling = false, qk_norm = false;
};

// A tensor as doubles (zeros of `size` when the model has none).
Matrix read(const TensorView* t, std::size_t size = 0) {
  if (t == nullptr) return Matrix(size, 0.0);
  std::vector<float> f(static_cast<std::size_t>(t->numel()));
  cpu::weight_row(TensorView{t->name, t->dtype, {1, t->numel()}, t->data, t->origin}, 0, f.data());
  return Matrix(f.begin(), f.end());
}

// y[n, out] = x[n, in] W[out, in]^T + b[out]
Matrix linear(const Matrix& x, int n, const Matrix& w, const Matrix& b) {
  const std::size_t out = b.size(), in = w.size() / out;
  Matrix y(static_cast<std::size_t>(n) * out);
  for (int r = 0; r < n; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double s = b[o];
      for (std::size_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// LlamaRMSNorm over rows of `dim`: x / sqrt(mean(x^2) + eps) * w.
void rms_norm(Matrix& x, const Matrix& w, double eps) {
  const std::size_t dim = w.size();
  for (std::size_t r = 0; r < x.size() / dim; ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (std::size_t i = 0; i < dim; ++i) x[r * dim + i] = w[i] * x[r * dim + i] * inv;
  }
}

// modeling_rope_utils: the default inverse frequencies, then linear or _compute_llama3_parameters.
std::vector<double> inv_freq(const ModelConfig& c, bool drop_scaling) {
  const int d = c.head_dim();
  const RopeScaling& s = c.rope_scaling;
  std::vector<double> f(static_cast<std::size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) {
    double v = 1.0 / std::pow(double(c.rope_theta), 2.0 * i / d);
    if (!drop_scaling && s.type == RopeScaling::Type::kLinear) v /= s.factor;
    if (!drop_scaling && s.type == RopeScaling::Type::kLlama3) {
      const double old = s.original_max_position_embeddings, wavelen = 2 * M_PI / v;
      if (wavelen > old / s.low_freq_factor) {
        v /= s.factor;
      } else if (wavelen >= old / s.high_freq_factor) {
        const double smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        v = (1 - smooth) * v / s.factor + smooth * v;
      }
    }
    f[static_cast<std::size_t>(i)] = v;
  }
  return f;
}

// apply_rotary_pos_emb: x * cos + rotate_half(x) * sin on each head of each row.
void rope(Matrix& x, int heads, int d, const std::vector<int>& positions, const std::vector<double>& freq) {
  for (std::size_t r = 0; r < positions.size(); ++r)
    for (int h = 0; h < heads; ++h) {
      double* xh = &x[(r * heads + h) * d];
      for (int i = 0; i < d / 2; ++i) {
        const double a = positions[r] * freq[i], x1 = xh[i], x2 = xh[i + d / 2];
        xh[i] = x1 * std::cos(a) - x2 * std::sin(a);
        xh[i + d / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
}

// The logits of the last token of `tokens` (a causal sequence at `positions`): [vocab].
std::vector<double> reference(const Model& m, const std::vector<int>& tokens, const std::vector<int>& positions,
                              const Drop& drop) {
  const ModelConfig& c = m.config();
  const int n = static_cast<int>(tokens.size()), hidden = c.hidden_size, d = c.head_dim();
  const int heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const double eps = c.rms_norm_eps;
  const Matrix embed = read(&m.embed_tokens());
  Matrix x(static_cast<std::size_t>(n) * hidden);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < hidden; ++i) x[r * hidden + i] = embed[std::size_t(tokens[r]) * hidden + i];
  const std::vector<double> freq = inv_freq(c, drop.scaling);
  const auto bias = [&](const TensorView* t, int size) { return read(drop.biases ? nullptr : t, size); };
  for (const LayerWeights& l : m.layers()) {
    Matrix h = x;
    rms_norm(h, read(l.attn_norm), eps);
    Matrix q = linear(h, n, read(l.q), bias(l.q_bias, c.q_dim()));
    Matrix k = linear(h, n, read(l.k), bias(l.k_bias, c.kv_dim()));
    const Matrix v = linear(h, n, read(l.v), bias(l.v_bias, c.kv_dim()));
    if (l.q_norm != nullptr && !drop.qk_norm) {  // Qwen3Attention: q_norm / k_norm over head_dim, before RoPE
      rms_norm(q, read(l.q_norm), eps);
      rms_norm(k, read(l.k_norm), eps);
    }
    rope(q, heads, d, positions, freq);
    rope(k, kv_heads, d, positions, freq);
    Matrix attn(static_cast<std::size_t>(n) * c.q_dim());
    for (int i = 0; i < n; ++i)
      for (int hd = 0; hd < heads; ++hd) {
        const int g = hd / (heads / kv_heads);
        std::vector<double> w(static_cast<std::size_t>(i) + 1, 0.0);
        double top = -INFINITY, total = 0;
        std::vector<bool> seen(w.size());
        for (int j = 0; j <= i; ++j) {  // the causal mask, and Mistral's window (q - k < window)
          seen[j] = c.sliding_window == 0 || drop.window || positions[i] - positions[j] < c.sliding_window;
          if (!seen[j]) continue;
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += q[(i * heads + hd) * d + e] * k[(j * kv_heads + g) * d + e];
          top = std::max(top, w[j] = dot / std::sqrt(double(d)));
        }
        for (int j = 0; j <= i; ++j) total += w[j] = seen[j] ? std::exp(w[j] - top) : 0.0;
        for (int e = 0; e < d; ++e) {
          double s = 0;
          for (int j = 0; j <= i; ++j) s += w[j] * v[(j * kv_heads + g) * d + e];
          attn[(i * heads + hd) * d + e] = s / total;
        }
      }
    const Matrix o = linear(attn, n, read(l.o), bias(l.o_bias, hidden));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = x;
    rms_norm(h, read(l.mlp_norm), eps);
    Matrix gate = linear(h, n, read(l.gate), bias(l.gate_bias, c.intermediate_size));
    const Matrix up = linear(h, n, read(l.up), bias(l.up_bias, c.intermediate_size));
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    const Matrix down = linear(gate, n, read(l.down), bias(l.down_bias, hidden));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  Matrix last(x.end() - hidden, x.end());
  rms_norm(last, read(&m.final_norm()), eps);
  return linear(last, 1, read(&m.lm_head()), Matrix(static_cast<std::size_t>(c.vocab_size), 0.0));
}

double relative_error(const std::vector<double>& want, std::span<const float> got) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(want[i] - got[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

double relative_error(const std::vector<double>& want, const std::vector<double>& other) {
  const std::vector<float> f(other.begin(), other.end());
  return relative_error(want, f);
}

struct Case {
  const char* preset;
  RopeScaling::Type scaling;  // replaces the preset's (linear checks the other type)
  std::vector<Drop> features;  // each must matter
};

}  // namespace

TEST_CASE("families: prefill, decode and tree rows equal the float64 Hugging Face formulas — each feature matters",
          "[engine][families]") {
  const std::vector<Case> cases = {
      {"llama3", RopeScaling::Type::kLlama3, {{.biases = true}, {.scaling = true}}},
      {"llama3", RopeScaling::Type::kLinear, {{.scaling = true}}},
      {"qwen2", RopeScaling::Type::kNone, {{.biases = true}}},
      {"qwen3", RopeScaling::Type::kNone, {{.qk_norm = true}}},
      {"mistral", RopeScaling::Type::kNone, {{.window = true}}}};
  const std::vector<int> tokens = {1, 450, 22, 9, 1000, 37, 2048, 5, 77, 300};
  for (const Case& k : cases) {
    INFO(k.preset << " rope scaling " << static_cast<int>(k.scaling));
    test::TempDir dir;
    RandomCheckpoint o{preset_shape(k.preset), DType::F32, 3, test::model_dir("target-16m") + "/tokenizer.model", 0.1f};
    if (k.scaling == RopeScaling::Type::kLinear) o.shape.rope_scaling = {RopeScaling::Type::kLinear, 4.0f};
    write_random_checkpoint(dir.path.string(), o);
    const Model model(dir.path.string());
    const auto backend = make_backend(BackendKind::kCpu, model, std::nullopt);
    const int vocab = model.config().vocab_size;
    // RoPE is relative, so scaling shows only over long distances: positions 500 apart (a
    // window needs consecutive ones, the cache then holds positions 0, 1, ...).
    const int step = model.config().sliding_window > 0 ? 1 : 500;
    std::vector<int> positions(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) positions[i] = step * static_cast<int>(i);
    const auto ref = [&](std::size_t len, const Drop& drop) {
      return reference(model, std::vector<int>(tokens.begin(), tokens.begin() + len),
                       std::vector<int>(positions.begin(), positions.begin() + len), drop);
    };

    test::Engine e(*backend, 4, 16);
    const int seq = e.cache.create();
    double worst = 0;
    // Prefill of 5, then 2 decode rows: 7 rows checked, the window of 4 dropping keys in both.
    std::vector<float> logits(5 * std::size_t(vocab));
    e.forward(seq, {std::span(tokens).first(5), std::span(positions).first(5), {}, true}, logits);
    for (std::size_t r = 0; r < 5; ++r)
      worst = std::max(worst, relative_error(ref(r + 1, {}), std::span<const float>(logits).subspan(r * vocab, vocab)));
    for (std::size_t r = 5; r < 7; ++r) {
      e.forward(seq, {std::span(tokens).subspan(r, 1), std::span(positions).subspan(r, 1), {}, true},
                std::span(logits).first(vocab));
      worst = std::max(worst, relative_error(ref(r + 1, {}), std::span<const float>(logits).first(vocab)));
    }
    // A tree after the 7: root tokens[7] with children tokens[8] and tokens[9] (both at depth 1).
    const std::vector<int> tree_tokens = {tokens[7], tokens[8], tokens[9]}, parents = {-1, 0, 0};
    const std::vector<int> tree_positions = {positions[7], positions[8], positions[8]};  // siblings share one
    e.forward(seq, {tree_tokens, tree_positions, parents, true}, std::span(logits).first(3 * std::size_t(vocab)));
    worst = std::max(worst, relative_error(ref(8, {}), std::span<const float>(logits).first(vocab)));
    worst = std::max(worst, relative_error(ref(9, {}), std::span<const float>(logits).subspan(vocab, vocab)));
    std::vector<int> sibling(tokens.begin(), tokens.begin() + 8), sibling_positions(positions.begin(), positions.begin() + 9);
    sibling.push_back(tokens[9]);
    sibling_positions.back() = positions[8];
    worst = std::max(worst, relative_error(reference(model, sibling, sibling_positions, {}),
                                           std::span<const float>(logits).subspan(2 * std::size_t(vocab), vocab)));
    INFO("max relative logit error " << worst);  // measured: 4e-7 to 3.1e-5 (AVX-512)
    CHECK(worst < kBound);
    // Each feature, dropped from the reference, moves the logits far past the bound.
    for (const Drop& drop : k.features) {
      const double moved = relative_error(ref(9, {}), ref(9, drop));
      INFO("the feature dropped moves the logits by " << moved);  // measured: 0.27 to 0.94
      CHECK(moved > 100 * kBound);
    }
  }
}

}  // namespace specula

namespace specula {

TEST_CASE("families: with a sliding window, prefill, decode and tree rows stay bitwise equal (batch invariance)",
          "[engine][families]") {
  test::TempDir dir;
  write_random_checkpoint(dir.path.string(), {preset_shape("mistral"), DType::F32, 5,
                                              test::model_dir("target-16m") + "/tokenizer.model", 0.1f});
  const Model model(dir.path.string());
  REQUIRE(model.config().sliding_window == 4);
  const auto backend = make_backend(BackendKind::kCpu, model, std::nullopt);
  const std::size_t vocab = static_cast<std::size_t>(model.config().vocab_size);
  const std::vector<int> tokens = {1, 450, 22, 9, 1000, 37, 2048, 5, 77, 300, 12};
  std::vector<int> positions(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int>(i);
  const std::span<const int> head = std::span(tokens).first(8), head_positions = std::span(positions).first(8);
  const std::span<const int> tail = std::span(tokens).subspan(8), tail_positions = std::span(positions).subspan(8);
  test::Engine e(*backend, 4, 32);

  // The last 3 rows of one prefill of all 11 tokens.
  std::vector<float> prefill(tokens.size() * vocab);
  e.forward(e.cache.create(), {tokens, positions, {}, true}, prefill);
  const std::vector<float> want(prefill.end() - static_cast<std::ptrdiff_t>(3 * vocab), prefill.end());
  // Decode rows one at a time after a prefill of 8.
  std::vector<float> decoded(3 * vocab), logits(8 * vocab);
  const int a = e.cache.create();
  e.forward(a, {head, head_positions, {}, false}, std::span(logits).first(vocab));
  for (std::size_t i = 0; i < 3; ++i)
    e.forward(a, {tail.subspan(i, 1), tail_positions.subspan(i, 1), {}, true}, std::span(decoded).subspan(i * vocab, vocab));
  // The same 3 tokens as a chain-shaped tree after a prefill of 8.
  std::vector<float> tree(3 * vocab);
  const int b = e.cache.create();
  const std::vector<int> parents = {-1, 0, 1};
  e.forward(b, {head, head_positions, {}, false}, std::span(logits).first(vocab));
  e.forward(b, {tail, tail_positions, parents, true}, tree);
  CHECK(decoded == want);
  CHECK(tree == want);
}

}  // namespace specula
