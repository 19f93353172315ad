// EAGLE draft heads: random EAGLE-3 heads in both published layouts and EAGLE-1 heads load
// against a random target, EAGLE-3's tap layers and vocabulary maps resolve as each layout's
// convention says, the CPU forward (the first step's feature, then a prefill, a decode row and
// a small tree through the paged cache) matches a plain double-precision forward of each kind
// written here, on the CPU and (a [gpu] case) on the CUDA backend, the two EAGLE-3 layouts of equal weights give bitwise equal results, a row's
// results do not depend on the batch, and every malformed or unsupported head, or one of the
// other kind, is refused with a message naming the file, key or tensor.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "engine/batch.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cuda/device.h"
#include "engine/head_backend.h"
#include "kv/kv_cache.h"
#include "model/checkpoint_writer.h"
#include "model/head_checkpoint_writer.h"
#include "model/head_model.h"
#include "model/model.h"
#include "tests/test_gpu_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Contains;
using test::TempDir;

// The target: a 6-layer LLaMA 3 shape (llama3 RoPE scaling, head_dim 32 x 4 heads over hidden
// 64), so that the default taps {2, 3, 3} lie inside it.
ModelConfig target_shape() {
  ModelConfig c = preset_shape("llama3");
  c.num_hidden_layers = 6;
  return c;
}

// The target checkpoint, written once per process: F32, or BF16 (the CUDA backend's matrix
// dtype, so that its forward reads the weights the double reference reads).
const Model& target(DType dtype = DType::F32) {
  const auto write = [](DType d) {
    static std::vector<std::unique_ptr<TempDir>> dirs;
    dirs.push_back(std::make_unique<TempDir>());
    const std::string dir = dirs.back()->path.string();
    write_random_checkpoint(dir, {target_shape(), d, 11, test::model_dir("target-16m") + "/tokenizer.model", 0.5f});
    return Model(dir);
  };
  static const Model f32 = write(DType::F32);
  if (dtype == DType::F32) return f32;
  static const Model bf16 = write(DType::BF16);
  return bf16;
}

// A head layer narrower than the target: hidden 48, head_dim 16 x 2 heads over 1 KV head.
ModelConfig narrow_layer() {
  ModelConfig c = target_shape();
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.explicit_head_dim = 16;
  c.rope_theta = 10000.0f;
  c.rope_scaling = {};
  c.rms_norm_eps = 1e-5f;
  return c;
}

RandomHead options(HeadLayout layout, uint64_t seed, HeadKind kind = HeadKind::kEagle3) {
  RandomHead o;
  o.kind = kind;
  o.layout = layout;
  o.seed = seed;
  o.weight_std = 0.1f;
  return o;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Rewrites dir/config.json through `edit`.
template <typename Edit>
void edit_config(const TempDir& dir, Edit edit) {
  nlohmann::json j = read_json(dir.path / "config.json");
  edit(j);
  std::ofstream(dir.path / "config.json") << j.dump(2);
}

// Rewrites the header of the safetensors file at `path` through `edit` (the data unchanged).
template <typename Edit>
void edit_safetensors_header(const fs::path& path, Edit edit) {
  std::ifstream in(path, std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string header(length, ' ');
  in.read(header.data(), static_cast<std::streamsize>(length));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  nlohmann::json j = nlohmann::json::parse(header);
  edit(j);
  header = j.dump();
  length = header.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << data;
}

// A tensor as doubles, row-major.
std::vector<double> to_double(const TensorView& t) {
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.numel() / rows;
  const TensorView flat{t.name, t.dtype, {rows, cols}, t.data, t.origin};
  std::vector<float> row(static_cast<std::size_t>(cols));
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    cpu::weight_row(flat, r, row.data());
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// y = W x for W [out, in].
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x) {
  const std::size_t in = x.size(), out = w.size() / in;
  std::vector<double> y(out, 0.0);
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  return y;
}

std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
  return y;
}

// The plain forward of a head: every row's keys and values kept in slot order, no paging; a
// row attends to the slots it is given.
//   EAGLE-3: feature = fc(taps); a = cat(input_norm(embed(token)), hidden_norm(x)) feeds
//            q/k/v, the residual starts at x (or hidden_norm(x)); logits = lm_head(norm(out)).
//   EAGLE-1: feature = the target's final norm of its last hidden state; h = fc(cat(
//            embed(token), x)) + bias feeds q/k/v and starts the residual; logits = the
//            target's lm_head(out).
class Reference {
 public:
  Reference(const HeadModel& head, const Model& target)
      : c_(head.config()),
        eagle1_(c_.kind == HeadKind::kEagle1),
        fc_(to_double(head.fc())),
        q_(to_double(*head.layer().q)),
        k_(to_double(*head.layer().k)),
        v_(to_double(*head.layer().v)),
        o_(to_double(*head.layer().o)),
        gate_(to_double(*head.layer().gate)),
        up_(to_double(*head.layer().up)),
        down_(to_double(*head.layer().down)),
        input_norm_(eagle1_ ? std::vector<double>() : to_double(*head.layer().attn_norm)),
        hidden_norm_(eagle1_ ? std::vector<double>() : to_double(*head.hidden_norm())),
        post_norm_(to_double(*head.layer().mlp_norm)),
        final_norm_(to_double(eagle1_ ? target.final_norm() : *head.final_norm())),
        lm_head_(to_double(eagle1_ ? target.lm_head() : *head.lm_head())),
        fc_bias_(eagle1_ ? to_double(*head.fc_bias()) : std::vector<double>()),
        target_eps_(target.config().rms_norm_eps),
        embed_(head.embed_tokens() ? *head.embed_tokens() : target.embed_tokens()),
        // RoPE's frequencies as Hugging Face computes them in f32 (RopeTable, tested in test_engine_ops).
        inv_freq_(cpu::RopeTable(c_.layer.head_dim(), c_.layer.rope_theta, c_.layer.rope_scaling).inv_freq()) {}

  std::vector<double> project(std::span<const float> taps) const {
    if (eagle1_) return rms({taps.begin(), taps.end()}, final_norm_, target_eps_);
    return matvec(fc_, {taps.begin(), taps.end()});
  }

  struct Result {
    std::vector<double> logits, out;
  };

  // One row: token at `position` with input x, seeing the earlier slots `visible` and itself
  // (appended as the next slot).
  Result row(int token, int position, const std::vector<double>& x, const std::vector<int>& visible) {
    const ModelConfig& l = c_.layer;
    const int hidden = l.hidden_size, hd = l.head_dim();
    const int heads = l.num_attention_heads, kv_heads = l.num_key_value_heads;
    const double eps = l.rms_norm_eps;
    std::vector<float> e(static_cast<std::size_t>(hidden));
    cpu::weight_row(embed_, token, e.data());
    std::vector<double> a, residual;
    if (eagle1_) {
      a.assign(e.begin(), e.end());
      a.insert(a.end(), x.begin(), x.end());
      residual = matvec(fc_, a);
      for (int i = 0; i < hidden; ++i) residual[i] += fc_bias_[i];
      a = residual;
    } else {
      a = rms({e.begin(), e.end()}, input_norm_, eps);
      const std::vector<double> hx = rms(x, hidden_norm_, eps);
      a.insert(a.end(), hx.begin(), hx.end());
      residual = c_.norm_before_residual ? hx : x;
    }
    std::vector<double> q = matvec(q_, a), k = matvec(k_, a), v = matvec(v_, a);
    const auto rope = [&](std::vector<double>& t, int num_heads) {
      for (int h = 0; h < num_heads; ++h) {
        for (int i = 0; i < hd / 2; ++i) {
          const double angle = double(position) * double(inv_freq_[i]);
          double& x0 = t[h * hd + i];
          double& x1 = t[h * hd + i + hd / 2];
          const double r0 = x0 * std::cos(angle) - x1 * std::sin(angle);
          const double r1 = x1 * std::cos(angle) + x0 * std::sin(angle);
          x0 = r0;
          x1 = r1;
        }
      }
    };
    rope(q, heads);
    rope(k, kv_heads);
    keys_.push_back(k);
    values_.push_back(v);
    std::vector<int> seen = visible;
    seen.push_back(static_cast<int>(keys_.size()) - 1);
    std::vector<double> attn(static_cast<std::size_t>(heads * hd), 0.0);
    for (int h = 0; h < heads; ++h) {
      const int g = h / (heads / kv_heads);
      std::vector<double> scores;
      double top = -1e300;
      for (int s : seen) {
        double d = 0;
        for (int i = 0; i < hd; ++i) d += q[h * hd + i] * keys_[s][g * hd + i];
        scores.push_back(d / std::sqrt(double(hd)));
        top = std::max(top, scores.back());
      }
      double sum = 0;
      for (double& sc : scores) sum += (sc = std::exp(sc - top));
      for (std::size_t j = 0; j < seen.size(); ++j)
        for (int i = 0; i < hd; ++i) attn[h * hd + i] += scores[j] / sum * values_[seen[j]][g * hd + i];
    }
    const std::vector<double> o = matvec(o_, attn);
    for (int i = 0; i < hidden; ++i) residual[i] += o[i];
    const std::vector<double> m = rms(residual, post_norm_, eps);
    std::vector<double> gate = matvec(gate_, m);
    const std::vector<double> up = matvec(up_, m);
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    const std::vector<double> down = matvec(down_, gate);
    for (int i = 0; i < hidden; ++i) residual[i] += down[i];
    return {matvec(lm_head_, eagle1_ ? residual : rms(residual, final_norm_, eps)), residual};
  }

 private:
  const HeadConfig& c_;
  bool eagle1_;
  std::vector<double> fc_, q_, k_, v_, o_, gate_, up_, down_;
  std::vector<double> input_norm_, hidden_norm_, post_norm_, final_norm_, lm_head_, fc_bias_;
  double target_eps_;
  const TensorView& embed_;
  std::vector<float> inv_freq_;
  std::vector<std::vector<double>> keys_, values_;  // [slot][kv_dim]
};

// The largest |got - want| over the largest |want| (at least 1).
double relative_error(std::span<const float> got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double err = 0, scale = 1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    if (!(e <= err)) err = e;  // a NaN sticks
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

// The bound on relative_error between the f32 forward (FMA chains, polynomial exp in the
// softmax) and the double reference: f32 rounding over a few hundred terms per product, with a
// wide margin.
constexpr double kTolerance = 1e-5;

std::vector<float> random_floats(std::size_t count, uint64_t seed) {
  Philox rng(seed, 7);
  std::vector<float> v(count);
  for (float& f : v) f = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return v;
}

// One head with its backend, KV cache and workspace; runs one sequence's rows.
struct HeadRun {
  const HeadModel& head;
  BackendKind kind = BackendKind::kCpu;
  const Model& model = target();
  std::unique_ptr<HeadBackend> backend = make_head_backend(kind, head, model);
  KvCache cache{backend->kv_layout(4), 32};
  std::unique_ptr<Workspace> workspace = backend->make_workspace();

  // Forward of `parts`; logits [num_logits, draft_vocab], out [rows, hidden].
  void run(std::span<const SequenceRows> parts, std::span<const float> x, std::vector<float>& logits,
           std::vector<float>& out) {
    const RaggedBatch batch = plan_batch(parts, cache.tables(), model.config());
    const KvPlan plan = cache.prepare(batch.seqs, batch.rows_per_seq());
    logits.assign(static_cast<std::size_t>(batch.num_logits()) * head.config().draft_vocab_size, 0.0f);
    out.assign(static_cast<std::size_t>(batch.num_rows()) * head.config().hidden_size(), 0.0f);
    backend->forward(batch, plan, cache.storage(), *workspace, x, logits, out);
  }
};

std::span<const float> row_of(const std::vector<float>& v, int r, int width) {
  return std::span<const float>(v).subspan(static_cast<std::size_t>(r) * width, static_cast<std::size_t>(width));
}

std::vector<double> as_double(std::span<const float> v) { return {v.begin(), v.end()}; }

// Prefill of 5 rows from fc, a decode row, then a 3-node tree (parents -1, 0, 0), each
// checked row by row against the reference; returns every result, concatenated, for
// comparisons between heads. `model` is the target the head was loaded against.
std::vector<float> check_against_reference(const HeadModel& head, BackendKind kind = BackendKind::kCpu,
                                           const Model& model = target()) {
  const HeadConfig& c = head.config();
  const int hidden = c.hidden_size(), dv = c.draft_vocab_size;
  HeadRun run{head, kind, model};
  Reference ref(head, model);
  const int seq = run.cache.create();
  std::vector<float> all, logits, out;

  // Prefill: x = fc(taps).
  const int n = 5;
  const std::vector<float> taps = random_floats(std::size_t(n) * c.num_taps() * c.target_hidden_size, 3);
  std::vector<float> x(std::size_t(n) * hidden);
  run.backend->project(taps, x, n, *run.workspace);
  const std::vector<int> tokens = {1, 450, 22, 9, 4095}, positions = {0, 1, 2, 3, 4};
  for (int r = 0; r < n; ++r) {
    INFO("fc row " << r);
    CHECK(relative_error(row_of(x, r, hidden), ref.project(row_of(taps, r, c.num_taps() * c.target_hidden_size))) <
          kTolerance);
  }
  const SequenceRows prefill{seq, tokens, positions, {}, RowLogits::kAll};
  run.run(std::span(&prefill, 1), x, logits, out);
  std::vector<int> visible;
  std::vector<float> prefill_out = out;
  for (int r = 0; r < n; ++r) {
    INFO("prefill row " << r);
    const Reference::Result want = ref.row(tokens[r], positions[r], as_double(row_of(x, r, hidden)), visible);
    visible.push_back(r);
    CHECK(relative_error(row_of(logits, r, dv), want.logits) < kTolerance);
    CHECK(relative_error(row_of(out, r, hidden), want.out) < kTolerance);
  }
  all.insert(all.end(), logits.begin(), logits.end());
  all.insert(all.end(), out.begin(), out.end());

  // Decode: the last row's output is the next x.
  const std::vector<float> x1(out.end() - hidden, out.end());
  const std::vector<int> token1 = {77}, position1 = {5};
  const SequenceRows decode{seq, token1, position1, {}, RowLogits::kLast};
  run.run(std::span(&decode, 1), x1, logits, out);
  {
    INFO("decode row");
    const Reference::Result want = ref.row(77, 5, as_double(x1), visible);
    visible.push_back(n);
    CHECK(relative_error(logits, want.logits) < kTolerance);
    CHECK(relative_error(out, want.out) < kTolerance);
  }
  all.insert(all.end(), logits.begin(), logits.end());
  all.insert(all.end(), out.begin(), out.end());

  // A tree of three nodes under the prefix: node 0, and its children 1 and 2.
  std::vector<float> x2;
  for (int r : {1, 2, 3}) {
    const std::span<const float> row = row_of(prefill_out, r, hidden);
    x2.insert(x2.end(), row.begin(), row.end());
  }
  const std::vector<int> token2 = {5, 6, 7}, position2 = {6, 7, 7}, parents = {-1, 0, 0};
  const SequenceRows tree{seq, token2, position2, parents, RowLogits::kAll};
  run.run(std::span(&tree, 1), x2, logits, out);
  const std::vector<int> prefix = visible;
  const int node0 = n + 1;
  for (int r = 0; r < 3; ++r) {
    INFO("tree node " << r);
    std::vector<int> seen = prefix;
    if (r > 0) seen.push_back(node0);
    const Reference::Result want = ref.row(token2[r], position2[r], as_double(row_of(x2, r, hidden)), seen);
    CHECK(relative_error(row_of(logits, r, dv), want.logits) < kTolerance);
    CHECK(relative_error(row_of(out, r, hidden), want.out) < kTolerance);
  }
  all.insert(all.end(), logits.begin(), logits.end());
  all.insert(all.end(), out.begin(), out.end());
  all.insert(all.end(), x.begin(), x.end());
  return all;
}

// A decode row's logits and output are bitwise those it gets alone when it shares a forward
// with another sequence's prefill, and when its output overwrites its input, for both kinds
// of head on `backend` against `model`.
void check_batch_invariance(BackendKind backend, const Model& model) {
  const ModelConfig& t = model.config();
  for (const HeadKind kind : {HeadKind::kEagle3, HeadKind::kEagle1}) {
    INFO(head_kind_name(kind));
    TempDir dir;
    write_random_head(dir.path.string(), t, options(HeadLayout::kEagle, 2, kind));
    const HeadModel head(dir.path.string(), t, kind);
    const int hidden = head.config().hidden_size();
    const std::vector<float> x = random_floats(std::size_t(4) * hidden, 5);
    const std::vector<int> tokens = {3, 4, 5, 6}, positions = {0, 1, 2, 3}, decode_token = {8}, decode_position = {4};
    // Alone: a prefill of 4 rows, then a decode row.
    HeadRun alone{head, backend, model};
    const int s = alone.cache.create();
    std::vector<float> logits, out, alone_logits, alone_out;
    alone.run(std::vector<SequenceRows>{{s, tokens, positions, {}, RowLogits::kAll}}, x, logits, out);
    alone.run(std::vector<SequenceRows>{{s, decode_token, decode_position, {}, RowLogits::kLast}},
              std::span(x).subspan(0, hidden), alone_logits, alone_out);
    // Together: the decode row after another sequence's prefill in one batch.
    HeadRun together{head, backend, model};
    const int s0 = together.cache.create(), s1 = together.cache.create();
    together.run(std::vector<SequenceRows>{{s1, tokens, positions, {}, RowLogits::kAll}}, x, logits, out);
    std::vector<float> x2(x.begin() + hidden, x.end());
    x2.insert(x2.end(), x.begin(), x.begin() + hidden);
    const std::vector<int> other_tokens = {9, 10, 11}, other_positions = {0, 1, 2};
    together.run(std::vector<SequenceRows>{{s0, other_tokens, other_positions, {}, RowLogits::kAll},
                                           {s1, decode_token, decode_position, {}, RowLogits::kLast}},
                 x2, logits, out);
    const int dv = head.config().draft_vocab_size;
    CHECK(std::memcmp(&logits[std::size_t(3) * dv], alone_logits.data(), std::size_t(dv) * sizeof(float)) == 0);
    CHECK(std::memcmp(&out[std::size_t(3) * hidden], alone_out.data(), std::size_t(hidden) * sizeof(float)) == 0);

    // In place: the decode row's out written over its x.
    HeadRun in_place{head, backend, model};
    const int s2 = in_place.cache.create();
    in_place.run(std::vector<SequenceRows>{{s2, tokens, positions, {}, RowLogits::kAll}}, x, logits, out);
    const SequenceRows decode{s2, decode_token, decode_position, {}, RowLogits::kLast};
    const RaggedBatch batch = plan_batch(std::span(&decode, 1), in_place.cache.tables(), t);
    const KvPlan plan = in_place.cache.prepare(batch.seqs, batch.rows_per_seq());
    std::vector<float> buffer(x.begin(), x.begin() + hidden);
    logits.assign(std::size_t(dv), 0.0f);
    in_place.backend->forward(batch, plan, in_place.cache.storage(), *in_place.workspace, buffer, logits, buffer);
    CHECK(std::memcmp(buffer.data(), alone_out.data(), std::size_t(hidden) * sizeof(float)) == 0);
    CHECK(std::memcmp(logits.data(), alone_logits.data(), std::size_t(dv) * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("safetensors: I64, I32 and BOOL tensors are read only when asked for, apart from weights", "[heads]") {
  TempDir dir;
  const std::vector<TensorSpec> specs = {{"w", DType::F32, {2}},
                                         {"d2t", DType::F32, {3}, IndexTensorView::Type::kI64},
                                         {"n", DType::F32, {2}, IndexTensorView::Type::kI32},
                                         {"t2d", DType::F32, {4}, IndexTensorView::Type::kBool}};
  write_safetensors(dir.file("model.safetensors"), specs, [](std::size_t index, std::span<unsigned char> bytes) {
    if (index == 1) {
      const int64_t v[3] = {-5, 0, 1LL << 40};
      std::memcpy(bytes.data(), v, sizeof v);
    } else if (index == 2) {
      const int32_t v[2] = {-7, 9};
      std::memcpy(bytes.data(), v, sizeof v);
    } else if (index == 3) {
      bytes[1] = 1;
      bytes[3] = 2;
    }
  });
  CHECK_THROWS_WITH(SafetensorsFile(dir.file("model.safetensors")),
                    Contains("tensor 'd2t' has unsupported dtype 'I64' (supported: F32, F16, BF16)"));
  const Checkpoint ck(dir.path.string(), /*index_tensors=*/true);
  CHECK(ck.tensors().size() == 1);
  REQUIRE(ck.index_tensors().size() == 3);
  const IndexTensorView& d2t = *ck.index_tensors().at("d2t");
  CHECK(d2t.type == IndexTensorView::Type::kI64);
  CHECK(d2t.shape == std::vector<int64_t>{3});
  CHECK((d2t.at(0) == -5 && d2t.at(1) == 0 && d2t.at(2) == (1LL << 40)));
  const IndexTensorView& n = *ck.index_tensors().at("n");
  CHECK((n.at(0) == -7 && n.at(1) == 9));
  const IndexTensorView& t2d = *ck.index_tensors().at("t2d");
  CHECK((t2d.at(0) == 0 && t2d.at(1) == 1 && t2d.at(2) == 0 && t2d.at(3) == 1));
}

TEST_CASE("EAGLE-3 head: tap layers and vocabulary maps in each layout's convention", "[heads]") {
  const ModelConfig& t = target().config();
  SECTION("EAGLE layout: eagle_config ids are layer outputs, the default taps layer inputs") {
    TempDir a, b;
    RandomHead o = options(HeadLayout::kEagle, 1);
    write_random_head(a.path.string(), t, o);
    const HeadModel plain(a.path.string(), t, HeadKind::kEagle3);
    CHECK(plain.config().layout == HeadLayout::kEagle);
    CHECK(plain.config().tap_layers == std::vector<int>{2, 3, 3});
    CHECK(plain.config().draft_vocab_size == t.vocab_size);
    CHECK(plain.d2t() == nullptr);
    CHECK(plain.draft_to_target()[4095] == 4095);
    // The EAGLE reference's own heads name LlamaForCausalLM; the midlayer.* tensors tell.
    edit_config(a, [](nlohmann::json& j) { j["architectures"] = {"LlamaForCausalLM"}; });
    CHECK(HeadModel(a.path.string(), t, HeadKind::kEagle3).config().layout == HeadLayout::kEagle);
    o.tap_ids = {0, 2, 5};
    o.draft_vocab = 300;
    for (int i = 0; i < 300; ++i) o.draft_to_target.push_back(13 * i + 5);
    write_random_head(b.path.string(), t, o);
    const HeadModel head(b.path.string(), t, HeadKind::kEagle3);
    CHECK(head.config().tap_layers == std::vector<int>{1, 3, 6});
    CHECK(head.config().draft_vocab_size == 300);
    CHECK(head.draft_to_target() == o.draft_to_target);
    REQUIRE(head.d2t() != nullptr);
    CHECK(head.d2t()->at(10) == 13 * 10 + 5 - 10);
    REQUIRE(head.t2d() != nullptr);
    CHECK(head.t2d()->at(18) == 1);
    CHECK(head.t2d()->at(19) == 0);
  }
  SECTION("speculators layout: ids are layer inputs, used as they are") {
    TempDir a;
    RandomHead o = options(HeadLayout::kSpeculators, 1);
    o.tap_ids = {0, 2, 6};
    o.draft_vocab = 64;
    o.t2d = false;
    write_random_head(a.path.string(), t, o);
    const HeadModel head(a.path.string(), t, HeadKind::kEagle3);
    CHECK(head.config().layout == HeadLayout::kSpeculators);
    CHECK(head.config().tap_layers == std::vector<int>{0, 2, 6});
    CHECK(head.t2d() == nullptr);
    const std::vector<int>& ids = head.draft_to_target();
    CHECK(ids.size() == 64);
    CHECK(std::is_sorted(ids.begin(), ids.end()));
    CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
    CHECK(ids.back() != 63);  // drawn from the whole vocabulary, not the identity
    CHECK(head.kv_layout(8).num_layers == 1);
    CHECK(head.kv_layout(8).kv_dim() == t.kv_dim());
  }
}

TEST_CASE("EAGLE-3 head: the CPU forward matches a plain double forward", "[heads]") {
  const ModelConfig& t = target().config();
  struct Case {
    const char* name;
    HeadLayout layout;
    bool narrow, embed, norm_before_residual;
    int draft_vocab;
  };
  for (const Case& k : {Case{"EAGLE, the target's shape and embedding, full vocabulary", HeadLayout::kEagle, false,
                             false, false, 0},
                        Case{"speculators, narrow layer, own embedding, norm before residual, draft vocabulary 200",
                             HeadLayout::kSpeculators, true, true, true, 200}}) {
    INFO(k.name);
    TempDir dir;
    RandomHead o = options(k.layout, 5);
    if (k.narrow) o.layer = narrow_layer();
    o.embed = k.embed;
    o.norm_before_residual = k.norm_before_residual;
    o.draft_vocab = k.draft_vocab;
    o.dtype = k.narrow ? DType::BF16 : DType::F32;
    write_random_head(dir.path.string(), t, o);
    const HeadModel head(dir.path.string(), t, HeadKind::kEagle3);
    CHECK(head.config().norm_before_residual == k.norm_before_residual);
    CHECK((head.embed_tokens() != nullptr) == k.embed);
    check_against_reference(head);
  }
}

TEST_CASE("EAGLE-3 head: the two layouts of equal weights give bitwise equal results", "[heads]") {
  const ModelConfig& t = target().config();
  TempDir eagle, speculators;
  RandomHead o = options(HeadLayout::kEagle, 9);
  o.embed = true;
  o.draft_vocab = 500;
  o.tap_ids = {1, 2, 3};  // outputs of layers 1, 2, 3
  write_random_head(eagle.path.string(), t, o);
  o.layout = HeadLayout::kSpeculators;
  o.tap_ids = {2, 3, 4};  // the same states as inputs of layers 2, 3, 4
  write_random_head(speculators.path.string(), t, o);
  const HeadModel a(eagle.path.string(), t, HeadKind::kEagle3), b(speculators.path.string(), t, HeadKind::kEagle3);
  CHECK(a.config().tap_layers == b.config().tap_layers);
  CHECK(a.draft_to_target() == b.draft_to_target());
  const std::vector<float> ra = check_against_reference(a), rb = check_against_reference(b);
  REQUIRE(ra.size() == rb.size());
  CHECK(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)) == 0);
}

TEST_CASE("EAGLE heads: a row's results do not depend on the batch", "[heads]") {
  check_batch_invariance(BackendKind::kCpu, target());
}

TEST_CASE("EAGLE heads: the CUDA forward matches a plain double forward and the batch", "[heads][gpu]") {
  REQUIRE_GPU();
  const Model& model = target(DType::BF16);
  const ModelConfig& t = model.config();
  struct Case {
    const char* name;
    HeadKind kind;
    HeadLayout layout;
    bool narrow, embed, norm_before_residual;
    int draft_vocab;
  };
  for (const Case& k :
       {Case{"EAGLE-3, the target's shape and embedding", HeadKind::kEagle3, HeadLayout::kEagle, false, false, false, 0},
        Case{"EAGLE-3, speculators, narrow layer, own embedding, norm before residual, draft vocabulary 200",
             HeadKind::kEagle3, HeadLayout::kSpeculators, true, true, true, 200},
        Case{"EAGLE-1, own embedding", HeadKind::kEagle1, HeadLayout::kEagle, false, true, false, 0}}) {
    INFO(k.name);
    TempDir dir;
    RandomHead o = options(k.layout, 5, k.kind);
    if (k.narrow) o.layer = narrow_layer();
    o.embed = k.embed;
    o.norm_before_residual = k.norm_before_residual;
    o.draft_vocab = k.draft_vocab;
    o.dtype = DType::BF16;
    write_random_head(dir.path.string(), t, o);
    const HeadModel head(dir.path.string(), t, k.kind);
    check_against_reference(head, BackendKind::kCuda, model);
  }
  check_batch_invariance(BackendKind::kCuda, model);

  // The kernels read 8 weights at a time: a head 44 wide is refused by name.
  TempDir dir;
  RandomHead o = options(HeadLayout::kEagle, 5);
  o.layer = narrow_layer();
  o.layer->hidden_size = 44;
  o.embed = true;
  write_random_head(dir.path.string(), t, o);
  const HeadModel head(dir.path.string(), t, HeadKind::kEagle3);
  CHECK_THROWS_WITH(make_head_backend(BackendKind::kCuda, head, model),
                    Contains(dir.path.string()) && Contains("hidden_size 44"));
}

TEST_CASE("EAGLE-3 head: malformed and unsupported heads are refused by name", "[heads]") {
  const ModelConfig& t = target().config();
  const auto written = [&](TempDir& dir, RandomHead o) {
    write_random_head(dir.path.string(), t, o);
    return dir.path.string();
  };
  const RandomHead eagle = options(HeadLayout::kEagle, 4), speculators = options(HeadLayout::kSpeculators, 4);

  SECTION("pytorch_model.bin without safetensors") {
    TempDir dir;
    written(dir, eagle);
    fs::rename(dir.path / "model.safetensors", dir.path / "pytorch_model.bin");
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("pytorch_model.bin") && Contains("convert") && Contains("safetensors"));
  }
  SECTION("an EAGLE-1 head: named, with the method that loads it") {
    TempDir dir;
    written(dir, options(HeadLayout::kEagle, 4, HeadKind::kEagle1));
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains(dir.path.string() + ": holds an EAGLE-1 head") && Contains("fc.bias") &&
                          Contains("--draft-method eagle)"));
  }
  SECTION("Medusa") {
    TempDir dir;
    std::ofstream(dir.path / "config.json") << R"({"medusa_num_heads": 5, "medusa_num_layers": 1})";
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("config.json") && Contains("Medusa") && Contains("'medusa_num_heads' = 5") &&
                          Contains("draft.method medusa"));
  }
  SECTION("another speculators type") {
    TempDir dir;
    written(dir, speculators);
    edit_config(dir, [](nlohmann::json& j) { j["speculators_model_type"] = "eagle"; });
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("'speculators_model_type' = \"eagle\"") && Contains("not implemented yet"));
  }
  SECTION("an unknown architecture") {
    TempDir dir;
    written(dir, eagle);
    edit_config(dir, [](nlohmann::json& j) { j["architectures"] = {"MistralForCausalLM"}; });
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("config.json") && Contains("MistralForCausalLM") && Contains("not an EAGLE head"));
  }
  SECTION("speculators without draft_vocab_size, norm_before_fc, an EAGLE head without taps") {
    TempDir a, b, c;
    written(a, speculators);
    edit_config(a, [](nlohmann::json& j) { j.erase("draft_vocab_size"); });
    CHECK_THROWS_WITH(HeadModel(a.path.string(), t, HeadKind::kEagle3),
                      Contains("config.json") && Contains("missing key 'draft_vocab_size'"));
    written(b, speculators);
    edit_config(b, [](nlohmann::json& j) { j["norm_before_fc"] = true; });
    CHECK_THROWS_WITH(HeadModel(b.path.string(), t, HeadKind::kEagle3),
                      Contains("'norm_before_fc' = true") && Contains("not implemented yet"));
    written(c, eagle);
    edit_config(c, [](nlohmann::json& j) { j["eagle_config"] = {{"use_aux_hidden_state", false}}; });
    CHECK_THROWS_WITH(HeadModel(c.path.string(), t, HeadKind::kEagle3),
                      Contains("'eagle_config.use_aux_hidden_state' = false") && Contains("not implemented yet"));
  }
  SECTION("more than one decoder layer") {
    TempDir dir;
    written(dir, speculators);
    edit_config(dir, [](nlohmann::json& j) { j["transformer_layer_config"]["num_hidden_layers"] = 2; });
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("transformer_layer_config") && Contains("'num_hidden_layers' = 2"));
  }
  SECTION("target_hidden_size differs from the target's hidden size") {
    TempDir dir;
    written(dir, eagle);
    edit_config(dir, [](nlohmann::json& j) { j["target_hidden_size"] = 96; });
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("config.json") && Contains("'target_hidden_size' = 96") && Contains("hidden_size 64"));
  }
  SECTION("vocab_size differs from the target's") {
    TempDir dir;
    written(dir, speculators);
    ModelConfig other = t;
    other.vocab_size = 5000;
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), other, HeadKind::kEagle3),
                      Contains("transformer_layer_config") && Contains("'vocab_size' = 4096") && Contains("5000"));
  }
  SECTION("tap layers outside the target") {
    TempDir a, b;
    RandomHead o = eagle;
    o.tap_ids = {1, 2, 6};  // the output of layer 6 of 6 layers
    written(a, o);
    CHECK_THROWS_WITH(HeadModel(a.path.string(), t, HeadKind::kEagle3),
                      Contains("eagle_config.eagle_aux_hidden_state_layer_ids") && Contains("layer id 6") &&
                          Contains("6 layers"));
    o = speculators;
    o.tap_ids = {-1, 2, 3};
    written(b, o);
    CHECK_THROWS_WITH(HeadModel(b.path.string(), t, HeadKind::kEagle3),
                      Contains("'eagle_aux_hidden_state_layer_ids'") && Contains("layer id -1"));
    TempDir c;
    written(c, eagle);
    ModelConfig shallow = t;
    shallow.num_hidden_layers = 2;
    CHECK_THROWS_WITH(HeadModel(c.path.string(), shallow, HeadKind::kEagle3),
                      Contains("no tap layers given") && Contains("[2, 1, -1]") && Contains("2 layers"));
  }
  SECTION("d2t mapping outside the vocabulary, or two draft ids to one target id") {
    TempDir a, b;
    RandomHead o = eagle;
    o.draft_to_target = {0, 7, 4096};
    o.t2d = false;
    written(a, o);
    CHECK_THROWS_WITH(HeadModel(a.path.string(), t, HeadKind::kEagle3),
                      Contains("model.safetensors") && Contains("'d2t' maps draft id 2 to target id 2 + 4094 = 4096") &&
                          Contains("[0, 4096)"));
    o.draft_to_target = {0, 7, 7};
    written(b, o);
    CHECK_THROWS_WITH(HeadModel(b.path.string(), t, HeadKind::kEagle3),
                      Contains("'d2t' maps draft ids 1 and 2 both to target id 7"));
  }
  SECTION("t2d inconsistent with d2t") {
    TempDir dir;
    RandomHead o = eagle;
    o.draft_to_target = {0, 7, 9};
    written(dir, o);
    // Set t2d[8] to true in the file.
    std::fstream f(dir.file("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t length = 0;
    f.read(reinterpret_cast<char*>(&length), 8);
    std::string header(length, ' ');
    f.read(header.data(), static_cast<std::streamsize>(length));
    const uint64_t begin = nlohmann::json::parse(header)["t2d"]["data_offsets"][0].get<uint64_t>();
    f.seekp(static_cast<std::streamoff>(8 + length + begin + 8));
    f.put(1);
    f.close();
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("'t2d' disagrees with 'd2t' at target id 8") && Contains("no draft id maps to it"));
  }
  SECTION("no embedding of its own and a hidden size other than the target's") {
    TempDir dir;
    RandomHead o = speculators;
    o.layer = narrow_layer();
    written(dir, o);
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("'embed_tokens.weight'") && Contains("hidden_size (48)") && Contains("(64)"));
  }
  SECTION("a tensor of the wrong shape, an unknown tensor") {
    TempDir a, b;
    written(a, eagle);
    edit_config(a, [](nlohmann::json& j) { j["intermediate_size"] = 100; });
    CHECK_THROWS_WITH(HeadModel(a.path.string(), t, HeadKind::kEagle3),
                      Contains("model.safetensors") &&
                          Contains("'midlayer.mlp.gate_proj.weight' has shape [128, 64]") &&
                          Contains("expected [100, 64]"));
    // A second shard holding a bias the head does not have.
    written(b, speculators);
    write_safetensors(b.file("extra.safetensors"), {{"layers.0.self_attn.q_proj.bias", DType::F32, {128}}},
                      [](std::size_t, std::span<unsigned char>) {});
    std::ofstream(b.path / "model.safetensors.index.json")
        << R"({"weight_map": {"fc.weight": "model.safetensors",)"
        << R"( "layers.0.self_attn.q_proj.bias": "extra.safetensors"}})";
    CHECK_THROWS_WITH(HeadModel(b.path.string(), t, HeadKind::kEagle3),
                      Contains("extra.safetensors") && Contains("unknown tensor 'layers.0.self_attn.q_proj.bias'"));
  }
  SECTION("the CUDA backend without a GPU") {
    TempDir dir;
    written(dir, eagle);
    const HeadModel head(dir.path.string(), t, HeadKind::kEagle3);
    if (cuda_device_count() == 0)
      CHECK_THROWS_WITH(make_head_backend(BackendKind::kCuda, head, target()),
                        Contains(dir.path.string()) && Contains("backend 'cuda'") && Contains("--backend cpu"));
  }
}

TEST_CASE("EAGLE-1 head: the CPU forward matches a plain double forward", "[heads]") {
  const ModelConfig& t = target().config();
  for (const bool own_embedding : {false, true}) {
    INFO((own_embedding ? "own embedding, BF16" : "the target's embedding, F32"));
    TempDir dir;
    RandomHead o = options(HeadLayout::kEagle, 6, HeadKind::kEagle1);
    o.embed = own_embedding;
    o.dtype = own_embedding ? DType::BF16 : DType::F32;
    write_random_head(dir.path.string(), t, o);
    const HeadModel head(dir.path.string(), t, HeadKind::kEagle1);
    const HeadConfig& c = head.config();
    CHECK(c.kind == HeadKind::kEagle1);
    CHECK(c.tap_layers == std::vector<int>{t.num_hidden_layers});
    CHECK(c.draft_vocab_size == t.vocab_size);
    CHECK(head.kv_layout(8).kv_dim() == t.kv_dim());
    CHECK((head.lm_head() == nullptr && head.final_norm() == nullptr && head.hidden_norm() == nullptr));
    CHECK((head.embed_tokens() != nullptr) == own_embedding);
    check_against_reference(head);
  }
}

TEST_CASE("EAGLE-1 head: malformed heads and EAGLE-3 heads are refused by name", "[heads]") {
  const ModelConfig& t = target().config();
  const RandomHead eagle1 = options(HeadLayout::kEagle, 4, HeadKind::kEagle1);
  SECTION("no fc.bias") {
    TempDir dir;
    write_random_head(dir.path.string(), t, eagle1);
    edit_safetensors_header(dir.path / "model.safetensors", [](nlohmann::json& j) {
      j["fc.bias_renamed"] = j["fc.bias"];
      j.erase("fc.bias");
    });
    // Still an EAGLE-1 head by its layers.0.* tensors.
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle1),
                      Contains(dir.path.string()) && Contains("missing tensor 'fc.bias'"));
  }
  SECTION("fc of the wrong shape") {
    TempDir dir;
    write_random_head(dir.path.string(), t, eagle1);
    edit_safetensors_header(dir.path / "model.safetensors",
                            [](nlohmann::json& j) { j["fc.weight"]["shape"] = {128, 64}; });
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle1),
                      Contains("model.safetensors") && Contains("'fc.weight' has shape [128, 64]") &&
                          Contains("expected [64, 128]"));
  }
  SECTION("a hidden size other than the target's") {
    TempDir dir;
    RandomHead o = eagle1;
    o.layer = narrow_layer();
    write_random_head(dir.path.string(), t, o);
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle1),
                      Contains("config.json") && Contains("'hidden_size' = 48") &&
                          Contains("the target's hidden_size 64"));
  }
  SECTION("an EAGLE-3 head, in either layout") {
    for (const HeadLayout layout : {HeadLayout::kEagle, HeadLayout::kSpeculators}) {
      TempDir dir;
      write_random_head(dir.path.string(), t, options(layout, 4));
      CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle1),
                        Contains(dir.path.string() + ": holds an EAGLE-3 head") && Contains("not an EAGLE-1 head") &&
                            Contains("--draft-method eagle3)"));
    }
  }
}

}  // namespace specula
