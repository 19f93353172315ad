// The residual stream through the seam (StateTaps) and the cache's state store: each tapped
// layer's input equals a float64 reference layer run on the previous tap; the logits are
// bitwise the same with and without taps; a row's taps do not depend on how it was batched;
// the state store follows fork and commit.
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/cpu/matmul.h"
#include "test_engine_support.h"
#include "test_support.h"

namespace specula {
namespace {

using Matrix = std::vector<double>;  // row-major

Matrix tensor64(const TensorView& t) {
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
  std::vector<float> row(static_cast<std::size_t>(cols));
  Matrix out;
  for (int64_t r = 0; r < rows; ++r) {
    cpu::weight_row(TensorView{t.name, t.dtype, {rows, cols}, t.data, t.origin}, r, row.data());
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// y [n, out] = x [n, in] W^T, W [out, in]
Matrix linear(const Matrix& x, const Matrix& w, int n, int in) {
  const int out = static_cast<int>(w.size()) / in;
  Matrix y(static_cast<std::size_t>(n) * out, 0.0);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) y[i * std::size_t(out) + o] += x[i * std::size_t(in) + k] * w[o * std::size_t(in) + k];
  return y;
}

Matrix rms_norm(const Matrix& x, const Matrix& weight, double eps, int n, int dim) {
  Matrix y(x.size());
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int k = 0; k < dim; ++k) ss += x[i * std::size_t(dim) + k] * x[i * std::size_t(dim) + k];
    const double scale = 1.0 / std::sqrt(ss / dim + eps);
    for (int k = 0; k < dim; ++k) y[i * std::size_t(dim) + k] = x[i * std::size_t(dim) + k] * scale * weight[k];
  }
  return y;
}

// Hugging Face's rotate_half RoPE on each head of every row (row i at position i).
void rope(Matrix& x, int n, int heads, int head_dim, double theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < heads; ++h) {
      double* v = &x[(i * std::size_t(heads) + h) * head_dim];
      for (int j = 0; j < half; ++j) {
        const double angle = i * std::pow(theta, -2.0 * j / head_dim);
        const double a = v[j], b = v[j + half];
        v[j] = a * std::cos(angle) - b * std::sin(angle);
        v[j + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
}

// Decoder layer `l` of `model` over a causal prefill whose layer input is x [n, hidden]: its output.
Matrix reference_layer(const Model& model, int l, Matrix x, int n) {
  const ModelConfig& c = model.config();
  const LayerWeights& w = model.layers()[static_cast<std::size_t>(l)];
  const int hidden = c.hidden_size, hd = c.head_dim(), heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const Matrix h = rms_norm(x, tensor64(*w.attn_norm), c.rms_norm_eps, n, hidden);
  Matrix q = linear(h, tensor64(*w.q), n, hidden), k = linear(h, tensor64(*w.k), n, hidden);
  const Matrix v = linear(h, tensor64(*w.v), n, hidden);
  rope(q, n, heads, hd, c.rope_theta);
  rope(k, n, kv_heads, hd, c.rope_theta);
  Matrix attn(static_cast<std::size_t>(n) * heads * hd, 0.0);
  for (int i = 0; i < n; ++i)
    for (int head = 0; head < heads; ++head) {
      const int kvh = head / (heads / kv_heads);
      std::vector<double> score(static_cast<std::size_t>(i + 1));
      double top = -1e300, sum = 0;
      for (int j = 0; j <= i; ++j) {
        double s = 0;
        for (int d = 0; d < hd; ++d)
          s += q[(i * std::size_t(heads) + head) * hd + d] * k[(j * std::size_t(kv_heads) + kvh) * hd + d];
        score[j] = s / std::sqrt(double(hd));
        top = std::max(top, score[j]);
      }
      for (double& s : score) sum += (s = std::exp(s - top));
      for (int j = 0; j <= i; ++j)
        for (int d = 0; d < hd; ++d)
          attn[(i * std::size_t(heads) + head) * hd + d] += score[j] / sum * v[(j * std::size_t(kv_heads) + kvh) * hd + d];
    }
  const Matrix o = linear(attn, tensor64(*w.o), n, heads * hd);
  for (std::size_t e = 0; e < x.size(); ++e) x[e] += o[e];
  const Matrix h2 = rms_norm(x, tensor64(*w.mlp_norm), c.rms_norm_eps, n, hidden);
  Matrix gate = linear(h2, tensor64(*w.gate), n, hidden);
  const Matrix up = linear(h2, tensor64(*w.up), n, hidden);
  for (std::size_t e = 0; e < gate.size(); ++e) gate[e] = gate[e] / (1.0 + std::exp(-gate[e])) * up[e];
  const Matrix down = linear(gate, tensor64(*w.down), n, c.intermediate_size);
  for (std::size_t e = 0; e < x.size(); ++e) x[e] += down[e];
  return x;
}

// Every row's taps of `layers` in one forward of a fresh sequence.  out [n, layers, hidden]
std::vector<float> prefill_taps(const Backend& backend, std::span<const int> tokens, std::span<const int> layers,
                                std::vector<float>& logits) {
  test::Engine e(backend, 16, 8);
  const int n = static_cast<int>(tokens.size());
  std::vector<int> positions(tokens.size()), rows(tokens.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(rows.begin(), rows.end(), 0);
  const RaggedBatch batch =
      plan_batch(std::vector{SequenceRows{e.cache.create(), tokens, positions, {}, RowLogits::kAll}}, e.cache.tables(),
                 backend.config());
  const KvPlan plan = e.cache.prepare(batch.seqs, batch.rows_per_seq());
  std::vector<float> taps(static_cast<std::size_t>(n) * layers.size() * backend.config().hidden_size);
  logits.resize(static_cast<std::size_t>(n) * backend.config().vocab_size);
  auto workspace = backend.make_workspace();
  backend.forward(batch, plan, e.cache.storage(), *workspace, logits, StateTaps{layers, rows, taps});
  return taps;
}

}  // namespace

TEST_CASE("taps: each layer's input is the float64 reference layer of the one before", "[engine][taps]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  const Model& model = backend.model();
  const int hidden = model.config().hidden_size, layers_total = model.config().num_hidden_layers;
  const std::vector<int> tokens{1, 450, 3012, 29, 77, 1024, 9, 4000, 12};
  const int n = static_cast<int>(tokens.size());
  std::vector<int> layers(static_cast<std::size_t>(layers_total + 1));
  std::iota(layers.begin(), layers.end(), 0);
  std::vector<float> logits;
  const std::vector<float> taps = prefill_taps(backend, tokens, layers, logits);
  const auto tap = [&](int row, int layer, int k) {
    return double(taps[(static_cast<std::size_t>(row) * layers.size() + layer) * hidden + k]);
  };
  // Layer 0's input is the embedding, exactly.
  const Matrix embed = tensor64(model.embed_tokens());
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < hidden; ++k) REQUIRE(tap(i, 0, k) == embed[tokens[i] * std::size_t(hidden) + k]);
  for (int l = 0; l < layers_total; ++l) {
    Matrix x(static_cast<std::size_t>(n) * hidden);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < hidden; ++k) x[i * std::size_t(hidden) + k] = tap(i, l, k);
    const Matrix next = reference_layer(model, l, x, n);
    double worst = 0;
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < hidden; ++k)
        worst = std::max(worst, std::abs(next[i * std::size_t(hidden) + k] - tap(i, l + 1, k)) /
                                    (1.0 + std::abs(next[i * std::size_t(hidden) + k])));
    INFO("layer " << l << ": worst relative error " << worst);
    CHECK(worst < 1e-4);  // f32 against f64 through one layer
  }
  // The last tap, normalised and through the head, gives the logits.
  Matrix last(static_cast<std::size_t>(n) * hidden);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < hidden; ++k) last[i * std::size_t(hidden) + k] = tap(i, layers_total, k);
  const Matrix expect =
      linear(rms_norm(last, tensor64(model.final_norm()), model.config().rms_norm_eps, n, hidden), tensor64(model.lm_head()), n, hidden);
  double worst = 0;
  for (std::size_t e = 0; e < expect.size(); ++e) worst = std::max(worst, std::abs(expect[e] - logits[e]));
  CHECK(worst < 1e-3);
}

TEST_CASE("taps: logits are bitwise the same with and without, and a row's taps do not depend on its batch",
          "[engine][taps]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  const int hidden = backend.config().hidden_size, vocab = backend.config().vocab_size;
  const std::vector<int> tokens{1, 450, 3012, 29, 77, 1024, 9};
  const std::vector<int> layers{2, 0, 1};
  std::vector<float> with_taps;
  const std::vector<float> taps = prefill_taps(backend, tokens, layers, with_taps);

  test::Engine plain(backend, 16, 8);
  std::vector<int> positions(tokens.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> without(with_taps.size());
  plain.forward(plain.cache.create(), {tokens, positions, {}, true}, without);
  CHECK(with_taps == without);

  // The same rows through a cache that keeps states: a prefill of 4, then a tree of the other
  // rows as a chain (parents), each row's states at its slot.
  test::Engine stored(backend, 4, 8);
  stored.cache.keep_states(layers, static_cast<int>(layers.size()) * hidden);
  const int seq = stored.cache.create();
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(vocab));
  stored.forward(seq, {std::span(tokens).first(4), std::span(positions).first(4), {}, true},
                 std::span(logits).first(4 * static_cast<std::size_t>(vocab)));
  const std::vector<int> parents{-1, 0, 1};
  stored.forward(seq, {std::span(tokens).subspan(4), std::span(positions).subspan(4), parents, true},
                 std::span(logits).subspan(4 * static_cast<std::size_t>(vocab)));
  CHECK(logits == with_taps);
  const std::size_t width = layers.size() * static_cast<std::size_t>(hidden);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::span<const float> states = stored.cache.states(seq, static_cast<int>(i));
    INFO("row " << i);
    CHECK(std::equal(states.begin(), states.end(), taps.begin() + static_cast<std::ptrdiff_t>(i * width)));
  }

  // A fork shares them; a commit moves an accepted node's states with its keys and values.
  const int child = stored.cache.fork(seq);
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
    const std::span<const float> a = stored.cache.states(seq, i), b = stored.cache.states(child, i);
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
  std::vector<float> slot6(stored.cache.states(child, 6).begin(), stored.cache.states(child, 6).end());
  stored.cache.commit(child, 4, std::vector{2});  // keep tree node 2 (slot 6) alone, now at slot 4
  REQUIRE(stored.cache.length(child) == 5);
  const std::span<const float> moved = stored.cache.states(child, 4);
  CHECK(std::equal(moved.begin(), moved.end(), slot6.begin(), slot6.end()));
  const std::span<const float> kept = stored.cache.states(seq, 4);  // the parent's slot 4 is untouched
  CHECK(std::equal(kept.begin(), kept.end(), taps.begin() + static_cast<std::ptrdiff_t>(4 * width)));
}

TEST_CASE("taps: a request outside the model or the batch is refused", "[engine][taps]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  const std::vector<int> tokens{1, 450};
  test::Engine e(backend, 16, 8);
  const std::vector<int> positions{0, 1};
  const RaggedBatch batch = plan_batch(std::vector{SequenceRows{e.cache.create(), tokens, positions, {}, RowLogits::kLast}},
                                       e.cache.tables(), backend.config());
  const KvPlan plan = e.cache.prepare(batch.seqs, batch.rows_per_seq());
  auto workspace = backend.make_workspace();
  std::vector<float> logits(static_cast<std::size_t>(backend.config().vocab_size));
  const std::vector<int> too_deep{3}, row0{0}, row2{2};
  std::vector<float> out(static_cast<std::size_t>(backend.config().hidden_size));
  CHECK_THROWS_WITH(backend.forward(batch, plan, e.cache.storage(), *workspace, logits, StateTaps{too_deep, row0, out}),
                    Catch::Contains("tap layer 3 is outside [0, 2]"));
  const std::vector<int> layer0{0};
  CHECK_THROWS_WITH(backend.forward(batch, plan, e.cache.storage(), *workspace, logits, StateTaps{layer0, row2, out}),
                    Catch::Contains("tap row 2 is outside the batch's 2 rows"));
  const int hidden = backend.config().hidden_size;
  e.cache.keep_states({0}, hidden);
  e.cache.keep_states({0}, hidden);  // the same store again: nothing changes
  CHECK_THROWS_WITH(e.cache.keep_states({1}, hidden), Catch::Contains("another store was asked for"));
}

}  // namespace specula
