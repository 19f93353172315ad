// Medusa heads (FasterDecoding's layout): random heads written by write_random_medusa load
// against target-16m, the forward (the target's final norm, ResBlocks, lm_heads) matches a
// plain double-precision forward written here on the CPU and (a [gpu] case) on CUDA, a row's logits do not depend on the batch, and
// malformed heads are refused with a message naming the file, key or tensor.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "engine/cpu/matmul.h"
#include "engine/medusa_backend.h"
#include "model/head_checkpoint_writer.h"
#include "model/medusa_checkpoint_writer.h"
#include "model/head_model.h"
#include "model/medusa_model.h"
#include "model/model.h"
#include "tests/test_gpu_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Contains;
using test::TempDir;

const Model& target() { return test::store().model(test::model_dir("target-16m")); }

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

std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x) {
  const std::size_t in = x.size(), out = w.size() / in;
  std::vector<double> y(out, 0.0);
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  return y;
}

// Head i's logits of one pre-norm state, in double: final norm, ResBlocks, lm_head.
std::vector<double> reference(const MedusaModel& m, const Model& t, std::span<const float> state, int head) {
  const std::vector<double> norm = to_double(t.final_norm());
  double ss = 0;
  for (float v : state) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / double(state.size()) + t.config().rms_norm_eps);
  std::vector<double> x(state.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = state[i] * scale * norm[i];
  const MedusaModel::Head& h = m.heads()[static_cast<std::size_t>(head)];
  for (const MedusaModel::ResBlock& b : h.blocks) {
    const std::vector<double> y = matvec(to_double(*b.weight), x), bias = to_double(*b.bias);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double z = y[i] + bias[i];
      x[i] += z / (1.0 + std::exp(-z));
    }
  }
  return matvec(to_double(*h.lm_head), x);
}

std::string written(TempDir& dir, const RandomMedusa& o) {
  write_random_medusa(dir.path.string(), target().config(), o);
  return dir.path.string();
}

template <typename Edit>
void edit_config(const TempDir& dir, Edit edit) {
  nlohmann::json j;
  {
    std::ifstream in(dir.path / "config.json");
    j = nlohmann::json::parse(in);
  }
  edit(j);
  std::ofstream(dir.path / "config.json") << j.dump(2);
}

// Heads of `layers` ResBlocks stored in `dtype` on backend `kind`: three rows' logits of three
// heads against the double reference, then each row alone and its first heads alone bitwise
// equal to the batch's.
void check_forward(BackendKind kind, int layers, DType dtype) {
  const Model& t = target();
  const int hidden = t.config().hidden_size, vocab = t.config().vocab_size;
  INFO("medusa_num_layers " << layers << ", " << dtype_name(dtype) << ", backend " << name_of(kind));
  TempDir dir;
  RandomMedusa o;
  o.num_heads = 3;
  o.num_layers = layers;
  o.dtype = dtype;
  o.seed = 7;
  o.weight_std = 0.1f;
  const MedusaModel m(written(dir, o), t.config());
  CHECK(m.config().num_heads == 3);
  CHECK(m.config().num_layers == layers);
  CHECK(m.heads()[2].blocks.size() == static_cast<std::size_t>(layers));
  const auto backend = make_medusa_backend(kind, m, t);
  const auto ws = backend->make_workspace();

  // Three rows of states on the scale of a residual stream.
  const int n = 3;
  std::vector<float> states(static_cast<std::size_t>(n) * hidden);
  Philox rng(3, 0);
  for (float& v : states) v = 4.0f * (static_cast<float>(rng.uniform()) - 0.5f);
  std::vector<float> logits(static_cast<std::size_t>(n) * 3 * vocab);
  backend->forward(states, n, 3, *ws, logits);
  for (int r = 0; r < n; ++r) {
    const auto state = std::span<const float>(states).subspan(static_cast<std::size_t>(r) * hidden, hidden);
    for (int i = 0; i < 3; ++i) {
      const std::vector<double> want = reference(m, t, state, i);
      double worst = 0, top = 0;
      for (int v = 0; v < vocab; ++v) {
        const double err = std::abs(want[v] - logits[(static_cast<std::size_t>(r) * 3 + i) * vocab + v]);
        if (!(err <= worst)) worst = err;  // a NaN sticks
        top = std::max(top, std::abs(want[v]));
      }
      INFO("row " << r << ", head " << i << ": max error " << worst << " of max |logit| " << top);
      CHECK(worst <= 1e-4 * std::max(1.0, top));
    }
  }
  // Batch invariance: each row alone gives bitwise the same logits, and so do its first
  // heads run alone.
  for (int r = 0; r < n; ++r) {
    for (int heads = 1; heads <= 3; ++heads) {
      std::vector<float> alone(static_cast<std::size_t>(heads) * vocab);
      backend->forward(std::span<const float>(states).subspan(static_cast<std::size_t>(r) * hidden, hidden), 1, heads,
                       *ws, alone);
      CHECK(std::equal(alone.begin(), alone.end(), logits.begin() + static_cast<std::ptrdiff_t>(r) * 3 * vocab));
    }
  }
  CHECK_THROWS_WITH(backend->forward(states, n, 4, *ws, logits), Contains("4 heads asked of 3"));
}

}  // namespace

TEST_CASE("Medusa heads: the CPU forward matches a plain double forward", "[heads]") {
  check_forward(BackendKind::kCpu, 1, DType::F32);
  check_forward(BackendKind::kCpu, 2, DType::BF16);
}

TEST_CASE("Medusa heads: the CUDA forward matches a plain double forward", "[heads][gpu]") {
  REQUIRE_GPU();
  check_forward(BackendKind::kCuda, 1, DType::BF16);
  check_forward(BackendKind::kCuda, 2, DType::BF16);
}

TEST_CASE("Medusa heads: malformed heads are refused by name", "[heads]") {
  const ModelConfig& t = target().config();
  RandomMedusa o;
  o.num_heads = 2;
  o.seed = 1;

  SECTION("pytorch_model.bin without safetensors") {
    TempDir dir;
    written(dir, o);
    fs::rename(dir.path / "model.safetensors", dir.path / "pytorch_model.bin");
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t),
                      Contains("pytorch_model.bin") && Contains("convert") && Contains("tools/heads/"));
  }
  SECTION("hidden_size that is not the target's") {
    TempDir dir;
    written(dir, o);
    edit_config(dir, [](nlohmann::json& j) { j["hidden_size"] = 100; });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t),
                      Contains("config.json") && Contains("'hidden_size' = 100") &&
                          Contains("target's hidden_size " + std::to_string(t.hidden_size)));
  }
  SECTION("vocab_size that is not the target's") {
    TempDir dir;
    written(dir, o);
    edit_config(dir, [](nlohmann::json& j) { j["vocab_size"] = 32000; });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t),
                      Contains("config.json") && Contains("'vocab_size' = 32000") &&
                          Contains("target's vocab_size " + std::to_string(t.vocab_size)));
  }
  SECTION("no medusa_num_layers") {
    TempDir dir;
    written(dir, o);
    edit_config(dir, [](nlohmann::json& j) { j.erase("medusa_num_layers"); });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t), Contains("config.json") && Contains("'medusa_num_layers' is missing"));
  }
  SECTION("medusa_num_heads not a positive integer") {
    TempDir dir;
    written(dir, o);
    edit_config(dir, [](nlohmann::json& j) { j["medusa_num_heads"] = 0; });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t), Contains("'medusa_num_heads' must be a positive integer"));
  }
  SECTION("weights of another width (no hidden_size key)") {
    TempDir dir;
    ModelConfig narrow = t;
    narrow.hidden_size = 64;
    write_random_medusa(dir.path.string(), narrow, o);
    edit_config(dir, [](nlohmann::json& j) { j.erase("hidden_size"); });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t),
                      Contains("model.safetensors") && Contains("'medusa_head.0.0.linear.weight' has shape [64, 64]"));
  }
  SECTION("fewer layers in the config than in the weights: a missing lm_head") {
    TempDir dir;
    o.num_layers = 2;
    written(dir, o);
    edit_config(dir, [](nlohmann::json& j) { j["medusa_num_layers"] = 1; });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t), Contains("'medusa_head.0.1.weight' is missing"));
  }
  SECTION("fewer heads in the config than in the weights: an unknown tensor") {
    TempDir dir;
    written(dir, o);
    edit_config(dir, [](nlohmann::json& j) { j["medusa_num_heads"] = 1; });
    CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t),
                      Contains("model.safetensors") && Contains("unknown tensor 'medusa_head.1."));
  }
  SECTION("EAGLE heads, each layout, point at their draft methods") {
    for (const auto& [kind, layout] : {std::pair{HeadKind::kEagle3, HeadLayout::kEagle},
                                       std::pair{HeadKind::kEagle3, HeadLayout::kSpeculators},
                                       std::pair{HeadKind::kEagle1, HeadLayout::kEagle}}) {
      TempDir dir;
      RandomHead h;
      h.kind = kind;
      h.layout = layout;
      write_random_head(dir.path.string(), t, h);
      CHECK_THROWS_WITH(MedusaModel(dir.path.string(), t),
                        Contains("config.json") && Contains("not a Medusa head") &&
                            Contains(layout == HeadLayout::kSpeculators ? "speculators_model_type" : "architectures") &&
                            Contains("--draft-method eagle3|eagle"));
    }
  }
  SECTION("the EAGLE-3 loader points at draft.method medusa") {
    TempDir dir;
    written(dir, o);
    CHECK_THROWS_WITH(HeadModel(dir.path.string(), t, HeadKind::kEagle3),
                      Contains("'medusa_num_heads' = 2") && Contains("draft.method medusa"));
  }
}

}  // namespace specula
