// The CUDA backend on a GPU ([gpu], CTest label gpu; each test skips with the reason when
// cuda_device_count() is 0): every kernel against the CPU function it must equal on fresh
// random inputs over sweeps of shapes (the TinyLlama-1.1B shape among them), outputs poisoned
// with NaN first, ||out - ref|| / ||ref|| against a float64 reference under 1e-3 for f32
// operands and 1e-2 for bf16 ones, NaN never passing; batch invariance on the device (a row's
// logits bitwise equal alone and in batches of 1-256 rows with prefill chunks, other sequences
// and trees, graphs replayed, and a prompt's cache the same however it was chunked); full-model
// logits against the CPU backend for the three bundled models; greedy continuations against
// the Hugging Face reference (tests/data/hf-greedy.json) wherever the top-2 gap exceeds the bound
// (that rule checked on the CPU with the same bf16 matrices, [engine][cuda], no GPU needed).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string_view>
#include <tuple>

#include "engine/backend.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_harness.h"
#include "engine/forward.h"
#include "tests/test_gpu_support.h"
#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

namespace harness = cuda::harness;

constexpr double kF32Bound = 1e-3;
constexpr double kBf16Bound = 1e-2;

// ||out - ref|| / ||ref||; infinity when any output is not finite.
double rel_error(std::span<const float> out, std::span<const double> ref) {
  REQUIRE(out.size() == ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
double rel_error(std::span<const float> out, std::span<const float> ref) {
  return rel_error(out, std::vector<double>(ref.begin(), ref.end()));
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::uint16_t bf16_bits(float v) {
  unsigned char b[2];
  store_value(v, DType::BF16, b);
  std::uint16_t bits;
  std::memcpy(&bits, b, 2);
  return bits;
}
float from_bf16(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("cuda kernels: RMSNorm, SiLU-gate and embedding equal the CPU's", "[gpu]") {
  REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int dim : {64, 256, 2048, 5632})
    for (int n : {1, 7, 64}) {
      INFO("rms_norm n " << n << ", dim " << dim);
      const std::vector<float> x = random_floats(rng, static_cast<std::size_t>(n) * dim, 3.0f);
      const std::vector<float> w = random_floats(rng, static_cast<std::size_t>(dim));
      const std::vector<float> out = harness::rms_norm(x, w, 1e-5f, n, dim);
      std::vector<double> ref(x.size());
      for (int r = 0; r < n; ++r) {
        double sum = 0;
        for (int i = 0; i < dim; ++i) sum += double(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(sum / dim + 1e-5);
        for (int i = 0; i < dim; ++i) ref[r * dim + i] = w[i] * (x[r * dim + i] * inv);
      }
      CHECK(rel_error(out, ref) < kF32Bound);
      std::vector<float> cpu(x.size());
      cpu::rms_norm(x.data(), w.data(), 1e-5f, cpu.data(), n, dim);
      CHECK(rel_error(out, cpu) < kF32Bound);
    }
  for (int ffn : {64, 1000, 5632})
    for (int n : {1, 5}) {
      INFO("silu_mul n " << n << ", ffn " << ffn);
      const std::vector<float> gu = random_floats(rng, static_cast<std::size_t>(n) * 2 * ffn, 4.0f);
      const std::vector<float> out = harness::silu_mul(gu, n, ffn);
      std::vector<double> ref(static_cast<std::size_t>(n) * ffn);
      std::vector<float> gate(ref.size()), up(ref.size());
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < ffn; ++i) {
          const double g = gu[r * 2 * ffn + i], u = gu[r * 2 * ffn + ffn + i];
          ref[r * ffn + i] = g / (1 + std::exp(-g)) * u;
          gate[r * ffn + i] = static_cast<float>(g), up[r * ffn + i] = static_cast<float>(u);
        }
      CHECK(rel_error(out, ref) < kF32Bound);
      cpu::silu_mul(gate.data(), up.data(), static_cast<std::int64_t>(gate.size()));
      CHECK(rel_error(out, gate) < kF32Bound);
    }
  for (const char* name : {"target-16m", "draft-1m"}) {
    const Model& model = test::shared_backend(test::model_dir(name)).model();
    const TensorView& table = model.embed_tokens();
    std::vector<int> tokens = {0, 1, static_cast<int>(table.shape[0]) - 1, 17, 17};
    const std::vector<float> out = harness::embed(table, tokens);
    std::vector<float> ref(out.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) cpu::weight_row(table, tokens[i], &ref[i * table.shape[1]]);
    CHECK(std::memcmp(out.data(), ref.data(), ref.size() * sizeof(float)) == 0);  // a widening: exact
  }
}

TEST_CASE("cuda kernels: the matrix products equal a float64 reference, and the invariant kernel is batch-invariant",
          "[gpu]") {
  REQUIRE_GPU();
  std::mt19937 rng(2);
  struct Shape {
    int in, out;
  };
  // TinyLlama-1.1B's: q/o 2048 x 2048, k/v 256 x 2048, gate|up 11264 x 2048, down 2048 x 5632.
  for (const Shape s : {Shape{64, 8}, Shape{256, 200}, Shape{2048, 2048}, Shape{2048, 2560}, Shape{5632, 2048},
                        Shape{2048, 11264}})
    for (int n : {1, 2, 3, 8, 17, 64, 65, 300}) {
      const std::int64_t weights = static_cast<std::int64_t>(s.in) * s.out;
      if (n > cuda::kSmallRows && weights > 2048 * 2560) continue;  // a quick CPU reference
      if (test::host_execution() && weights > 2048 * 2560 && n != 1 && n != 17) continue;
      if (test::host_execution() && weights >= 2048 * 2048 && n > 65) continue;
      // Under the sanitizers the host execution checks each kernel's accesses on the shapes
      // up to q/o's and on row counts around the small kernel's tiles.
      if (test::host_execution() && test::kSanitized && (weights > 2048 * 2560 || n == 2 || n == 8 || n == 300)) continue;
      INFO("n " << n << ", in " << s.in << ", out " << s.out);
      const std::vector<float> x = random_floats(rng, static_cast<std::size_t>(n) * s.in);
      const std::vector<float> wf = random_floats(rng, static_cast<std::size_t>(s.out) * s.in, 0.05f);
      std::vector<std::uint16_t> w(wf.size());
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = bf16_bits(wf[i]);
      const std::vector<float> bias = random_floats(rng, static_cast<std::size_t>(s.out));
      const std::vector<float> y_in = random_floats(rng, static_cast<std::size_t>(n) * s.out);
      // x W^T in double over the bf16 weights, once (x as given: the small kernel reads it in
      // f32; cuBLASLt rounds it to bf16, inside the bf16 bound).
      std::vector<double> product(static_cast<std::size_t>(n) * s.out);
      for (int r = 0; r < n; ++r)
        for (int o = 0; o < s.out; ++o) {
          double acc = 0;
          for (int k = 0; k < s.in; ++k) acc += double(x[r * s.in + k]) * from_bf16(w[static_cast<std::size_t>(o) * s.in + k]);
          product[r * s.out + o] = acc;
        }
      for (bool accumulate : {false, true}) {
        std::vector<double> ref(product.size());
        for (int r = 0; r < n; ++r)
          for (int o = 0; o < s.out; ++o)
            ref[r * s.out + o] = (accumulate ? y_in[r * s.out + o] : 0.0) + product[r * s.out + o] + bias[o];
        if (n > cuda::kSmallRows) {  // cuBLASLt, where cublas_prefill asks for it
          const std::vector<float> cublas =
              harness::matmul(x, w, bias, y_in, n, s.in, s.out, accumulate, harness::MatmulPath::kCublasPrefill);
          CHECK(rel_error(cublas, ref) < kBf16Bound);
        }
        const std::vector<float> small =
            harness::matmul(x, w, bias, y_in, n, s.in, s.out, accumulate, harness::MatmulPath::kSmall);
        CHECK(rel_error(small, ref) < kF32Bound);
        // Row 0 alone gives bitwise the same row.
        const std::vector<float> alone = harness::matmul(std::span(x).first(s.in), w, bias, std::span(y_in).first(s.out),
                                                         1, s.in, s.out, accumulate, harness::MatmulPath::kSmall);
        CHECK(std::memcmp(alone.data(), small.data(), alone.size() * sizeof(float)) == 0);
      }
    }
}

namespace {

// A host cache of `layout` holding random keys and values for sequences of these lengths, and a
// batch over them of every kind (prefill chunk, decode row, tree), planned as a forward would.
struct AttentionCase {
  KvCache cache;
  RaggedBatch batch;
  KvPlan plan;
  std::vector<std::vector<int>> tokens, positions, parents;
};

std::unique_ptr<AttentionCase> attention_case(const ModelConfig& config, const KvLayout& layout, std::mt19937& rng,
                                              std::span<const int> lengths) {
  int blocks = 0;  // each sequence's keys and its new rows (at most 6), whole blocks
  for (int len : lengths) blocks += (len + 6 + layout.block_size - 1) / layout.block_size;
  auto c = std::make_unique<AttentionCase>(AttentionCase{KvCache(layout, blocks), {}, {}, {}, {}, {}});
  std::vector<int> seqs;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    seqs.push_back(c->cache.create());
    if (lengths[i] > 0) c->cache.append_slots(seqs.back(), lengths[i]);
    for (int l = 0; l < layout.num_layers; ++l)
      for (int slot = 0; slot < lengths[i]; ++slot) {
        const std::vector<float> k = random_floats(rng, static_cast<std::size_t>(layout.kv_dim()));
        const std::vector<float> v = random_floats(rng, static_cast<std::size_t>(layout.kv_dim()));
        std::copy(k.begin(), k.end(), c->cache.key(seqs.back(), l, slot));
        std::copy(v.begin(), v.end(), c->cache.value(seqs.back(), l, slot));
      }
  }
  std::vector<SequenceRows> parts;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const int len = lengths[i];
    switch (i % 3) {
      case 0:
        c->tokens.push_back({1, 2, 3, 4, 5, 6});
        c->positions.push_back({len, len + 1, len + 2, len + 3, len + 4, len + 5});
        c->parents.push_back({});
        break;
      case 1:
        c->tokens.push_back({1});
        c->positions.push_back({len});
        c->parents.push_back({});
        break;
      default:
        c->tokens.push_back({1, 2, 3, 4});
        c->positions.push_back({len, len + 1, len + 1, len + 2});
        c->parents.push_back({-1, 0, 0, 2});
    }
  }
  for (std::size_t i = 0; i < seqs.size(); ++i)
    parts.push_back(SequenceRows{seqs[i], c->tokens[i], c->positions[i], c->parents[i], RowLogits::kAll});
  c->batch = plan_batch(parts, c->cache.tables(), config);
  c->plan = c->cache.prepare(c->batch.seqs, c->batch.rows_per_seq());
  // The new rows' keys and values, as the layer would have written them.
  for (int l = 0; l < layout.num_layers; ++l)
    for (int slot : c->plan.row_slots) {
      const std::vector<float> k = random_floats(rng, static_cast<std::size_t>(layout.kv_dim()));
      const std::vector<float> v = random_floats(rng, static_cast<std::size_t>(layout.kv_dim()));
      std::copy(k.begin(), k.end(), c->cache.storage().row(l, 0, slot));
      std::copy(v.begin(), v.end(), c->cache.storage().row(l, 1, slot));
    }
  return c;
}

}  // namespace

TEST_CASE("cuda kernels: paged attention over the visibility CSR equals the CPU's, f32 and bf16 pages", "[gpu]") {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  ModelConfig config = test::shared_backend(test::model_dir("draft-1m")).config();
  struct Heads {
    int heads, kv_heads, head_dim;
  };
  // TinyLlama-1.1B: 32 heads, 4 kv heads, head_dim 64; Qwen3-like head_dim 128; a wide 256.
  for (const Heads h : {Heads{4, 4, 16}, Heads{32, 4, 64}, Heads{8, 2, 128}, Heads{2, 1, 256}})
    for (int block_size : {1, 16})
      for (int window : {0, 5}) {
        INFO(h.heads << " heads, " << h.kv_heads << " kv heads, head_dim " << h.head_dim << ", block size "
                     << block_size << ", window " << window);
        config.max_position_embeddings = 4096;
        const KvLayout layout{1, h.kv_heads, h.head_dim, block_size, KvDType::kF32};
        const std::vector<int> lengths = {0, 3, 40, 17, 300, 1000};
        auto c = attention_case(config, layout, rng, lengths);
        const int n = c->batch.num_rows();
        const std::vector<float> q = random_floats(rng, static_cast<std::size_t>(n) * h.heads * h.head_dim);
        const cpu::AttentionShape shape{h.heads, h.kv_heads, h.head_dim, window};
        std::vector<float> ref(q.size());
        cpu::attend_batch_reference(c->batch, c->plan, c->cache.storage(), 0, shape, q.data(), ref.data());
        const std::vector<float> f32 = harness::attention(c->batch, c->plan, c->cache.storage(), DType::F32, 0, h.heads,
                                                          window, q);
        CHECK(rel_error(f32, ref) < kF32Bound);
        const std::vector<float> bf16 = harness::attention(c->batch, c->plan, c->cache.storage(), DType::BF16, 0,
                                                           h.heads, window, q);
        CHECK(rel_error(bf16, ref) < kBf16Bound);
      }
}

TEST_CASE("cuda kernels: q/k norm, RoPE and the KV store equal the CPU's, and the copy list runs in order", "[gpu]") {
  REQUIRE_GPU();
  std::mt19937 rng(4);
  ModelConfig config = test::shared_backend(test::model_dir("draft-1m")).config();
  config.max_position_embeddings = 4096;
  struct Heads {
    int heads, kv_heads, head_dim;
  };
  for (const Heads h : {Heads{4, 4, 16}, Heads{32, 4, 64}, Heads{8, 2, 128}})
    for (bool qk_norm : {false, true})
      for (RopeScaling::Type type : {RopeScaling::Type::kNone, RopeScaling::Type::kLlama3}) {
        INFO(h.heads << " heads, head_dim " << h.head_dim << ", qk_norm " << qk_norm << ", rope type "
                     << static_cast<int>(type));
        const KvLayout layout{2, h.kv_heads, h.head_dim, 16, KvDType::kF32};
        const std::vector<int> lengths = {5, 2000};
        auto c = attention_case(config, layout, rng, lengths);
        const int n = c->batch.num_rows();
        const int q_dim = h.heads * h.head_dim, kv_dim = h.kv_heads * h.head_dim, width = q_dim + 2 * kv_dim;
        const std::vector<float> qkv = random_floats(rng, static_cast<std::size_t>(n) * width);
        RopeScaling scaling;
        scaling.type = type;
        if (type == RopeScaling::Type::kLlama3) scaling.factor = 8, scaling.original_max_position_embeddings = 1024;
        const cpu::RopeTable rope(h.head_dim, 500000.0f, scaling);
        const std::vector<float> qn = qk_norm ? random_floats(rng, h.head_dim) : std::vector<float>{};
        const std::vector<float> kn = qk_norm ? random_floats(rng, h.head_dim) : std::vector<float>{};
        // The CPU: cpu_backend.cpp's per-row steps.
        std::vector<float> expect = qkv;
        PageStorage& pages = c->cache.storage();
        std::vector<float> k_expect(static_cast<std::size_t>(n) * kv_dim), v_expect(k_expect.size());
        for (int r = 0; r < n; ++r) {
          float* q = &expect[static_cast<std::size_t>(r) * width];
          float* k = q + q_dim;
          if (qk_norm) {
            cpu::rms_norm(q, qn.data(), 1e-6f, q, h.heads, h.head_dim);
            cpu::rms_norm(k, kn.data(), 1e-6f, k, h.kv_heads, h.head_dim);
          }
          rope.apply(q, h.heads, c->batch.positions[r]);
          rope.apply(k, h.kv_heads, c->batch.positions[r]);
          std::copy_n(k, kv_dim, &k_expect[static_cast<std::size_t>(r) * kv_dim]);
          std::copy_n(k + kv_dim, kv_dim, &v_expect[static_cast<std::size_t>(r) * kv_dim]);
        }
        for (DType dtype : {DType::F32, DType::BF16}) {
          const double bound = dtype == DType::F32 ? kF32Bound : kBf16Bound;
          const std::vector<float> out = harness::qk_rope_store(c->batch, c->plan, pages, dtype, 1, qkv, rope.inv_freq(),
                                                                qn, kn, 1e-6f, h.heads);
          std::vector<float> q_out, q_ref, k_out, v_out;
          for (int r = 0; r < n; ++r) {
            const std::size_t at = static_cast<std::size_t>(r) * width;
            q_out.insert(q_out.end(), out.begin() + at, out.begin() + at + q_dim);
            q_ref.insert(q_ref.end(), expect.begin() + at, expect.begin() + at + q_dim);
            const int slot = c->plan.row_slots[r];
            k_out.insert(k_out.end(), pages.row(1, 0, slot), pages.row(1, 0, slot) + kv_dim);
            v_out.insert(v_out.end(), pages.row(1, 1, slot), pages.row(1, 1, slot) + kv_dim);
          }
          CHECK(rel_error(q_out, q_ref) < kF32Bound);
          CHECK(rel_error(k_out, k_expect) < bound);
          CHECK(rel_error(v_out, v_expect) < bound);
        }
      }

  // Copies in order: a later copy reads what an earlier one wrote.
  const KvLayout layout{3, 2, 8, 4, KvDType::kF32};
  PageStorage device_side(layout, 6), host_side(layout, 6);
  for (int l = 0; l < 3; ++l) {
    const std::vector<float> data = random_floats(rng, device_side.block_stride() * 6);
    std::copy(data.begin(), data.end(), device_side.layer(l));
    std::copy(data.begin(), data.end(), host_side.layer(l));
  }
  const std::vector<KvCopy> copies = {{KvCopy::Kind::kBlock, 0, 1}, {KvCopy::Kind::kSlot, 5, 9},
                                      {KvCopy::Kind::kBlock, 2, 3}, {KvCopy::Kind::kSlot, 13, 1}};
  host_side.execute(copies);
  harness::kv_copies(copies, device_side, DType::F32);
  for (int l = 0; l < 3; ++l)
    CHECK(std::memcmp(device_side.layer(l), host_side.layer(l), device_side.block_stride() * 6 * sizeof(float)) == 0);
}

namespace {

std::unique_ptr<Backend> cuda_backend(const Model& model, KvDType kv_dtype, bool cublas_prefill = false) {
  cuda::CudaOptions options;
  options.kv_dtype = kv_dtype;
  options.cublas_prefill = cublas_prefill;
  options.max_rows = 1024;
  options.kv_pool_bytes = std::size_t{1} << 30;
  return cuda::make_cuda_backend(model, std::nullopt, options);
}

}  // namespace

TEST_CASE("cuda backend: full-model logits equal the CPU backend's for the three bundled models", "[gpu]") {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  struct Run {
    const char* model;
    KvDType kv;
    bool cublas_prefill;
  };
  // The invariant products hold every row to the f32 bound with f32 pages; cuBLASLt's prefill
  // rounds activations to bf16, and the decode and tree rows read the K/V it wrote.
  for (const Run run : {Run{"target-16m", KvDType::kF32, false}, Run{"target-16m", KvDType::kBF16, false},
                        Run{"draft-4m", KvDType::kF32, false}, Run{"draft-4m", KvDType::kBF16, false},
                        Run{"draft-1m", KvDType::kF32, false}, Run{"draft-1m", KvDType::kBF16, false},
                        Run{"target-16m", KvDType::kF32, true}}) {
    // Under the sanitizers the host execution runs each page type and prefill path once.
    if (test::host_execution() && test::kSanitized &&
        (run.model == std::string_view("draft-4m") ||
         (run.model == std::string_view("target-16m") && run.kv == KvDType::kF32 && !run.cublas_prefill)))
      continue;
    INFO(run.model << ", KV pages " << name_of(run.kv) << (run.cublas_prefill ? ", cuBLASLt prefill" : ""));
    const Model& model = test::shared_backend(test::model_dir(run.model)).model();
    const cpu::CpuBackend cpu_bf16(model, MatrixFormat::kBF16);  // the same rounded matrices
    const auto gpu = cuda_backend(model, run.kv, run.cublas_prefill);
    const double bound = run.kv == KvDType::kF32 && !run.cublas_prefill ? kF32Bound : kBf16Bound;
    const int vocab = model.config().vocab_size;
    test::Engine on_cpu(cpu_bf16, 16, 64), on_gpu(*gpu, 16, 64);
    const int a_cpu = on_cpu.cache.create(), a_gpu = on_gpu.cache.create();
    // A prefill (100 rows; 40 through the invariant kernel on the host execution), then decode
    // rows and a tree (graphs).
    const int prompt_len = test::host_execution() && !run.cublas_prefill ? 40 : 100;
    std::vector<int> prompt(static_cast<std::size_t>(prompt_len)), positions(prompt.size());
    for (int& t : prompt) t = std::uniform_int_distribution<int>(3, vocab - 1)(rng);
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> lc(prompt.size() * static_cast<std::size_t>(vocab)), lg(lc.size());
    on_cpu.forward(a_cpu, {prompt, positions, {}, true}, lc);
    on_gpu.forward(a_gpu, {prompt, positions, {}, true}, lg);
    CHECK(rel_error(lg, lc) < bound);
    for (int step = 0; step < 4; ++step) {
      const std::vector<int> t = {5 + step}, p = {prompt_len + step};
      std::vector<float> dc(static_cast<std::size_t>(vocab)), dg(dc.size());
      on_cpu.forward(a_cpu, {t, p, {}, true}, dc);
      on_gpu.forward(a_gpu, {t, p, {}, true}, dg);
      CHECK(rel_error(dg, dc) < bound);
    }
    const std::vector<int> tree = {7, 8, 9}, tree_pos = {prompt_len + 4, prompt_len + 5, prompt_len + 5};
    const std::vector<int> parents = {-1, 0, 0};
    std::vector<float> tc(3 * static_cast<std::size_t>(vocab)), tg(tc.size());
    on_cpu.forward(a_cpu, {tree, tree_pos, parents, true}, tc);
    on_gpu.forward(a_gpu, {tree, tree_pos, parents, true}, tg);
    CHECK(rel_error(tg, tc) < bound);
  }
}

TEST_CASE("cuda backend: residual-stream taps equal the CPU backend's and leave the logits bitwise unchanged", "[gpu]") {
  REQUIRE_GPU();
  const Model& model = test::shared_backend(test::model_dir("draft-1m")).model();
  const cpu::CpuBackend cpu_bf16(model, MatrixFormat::kBF16);  // the same rounded matrices
  const auto gpu = cuda_backend(model, KvDType::kF32, false);
  const int vocab = model.config().vocab_size, hidden = model.config().hidden_size;
  const std::vector<int> layers{0, 2, 1};
  const int width = static_cast<int>(layers.size()) * hidden;
  test::Engine on_cpu(cpu_bf16, 16, 16), on_gpu(*gpu, 16, 16), plain_gpu(*gpu, 16, 16);
  on_cpu.cache.keep_states(layers, width);
  on_gpu.cache.keep_states(layers, width);
  const int a_cpu = on_cpu.cache.create(), a_gpu = on_gpu.cache.create(), a_plain = plain_gpu.cache.create();
  // A prefill, then decode rows and a tree (the rows a plain cache runs in graphs).
  std::vector<int> prompt(20), positions(prompt.size());
  std::iota(prompt.begin(), prompt.end(), 100);
  std::iota(positions.begin(), positions.end(), 0);
  const std::vector<int> decode = {7}, decode_pos = {20};
  const std::vector<int> tree = {8, 9, 10}, tree_pos = {21, 22, 22}, parents = {-1, 0, 0};
  for (const auto& [tokens, pos, tree_parents] :
       {std::tuple{std::span<const int>(prompt), std::span<const int>(positions), std::span<const int>()},
        std::tuple{std::span<const int>(decode), std::span<const int>(decode_pos), std::span<const int>()},
        std::tuple{std::span<const int>(tree), std::span<const int>(tree_pos), std::span<const int>(parents)}}) {
    std::vector<float> lc(tokens.size() * static_cast<std::size_t>(vocab)), lg(lc.size()), lp(lc.size());
    on_cpu.forward(a_cpu, {tokens, pos, tree_parents, true}, lc);
    on_gpu.forward(a_gpu, {tokens, pos, tree_parents, true}, lg);
    plain_gpu.forward(a_plain, {tokens, pos, tree_parents, true}, lp);
    CHECK(lg == lp);
  }
  const int slots = on_gpu.cache.length(a_gpu);
  REQUIRE(slots == 24);
  for (int slot = 0; slot < slots; ++slot) {
    INFO("slot " << slot);
    const std::span<const float> c = on_cpu.cache.states(a_cpu, slot), g = on_gpu.cache.states(a_gpu, slot);
    CHECK(rel_error(g, c) < kF32Bound);
  }
}

TEST_CASE("cuda backend: a row's logits are bitwise equal alone and in batches of 1-256 rows of prefill chunks, "
          "decode rows and trees, graphs replayed, and a prompt's cache is the same however it was chunked",
          "[gpu]") {
  REQUIRE_GPU();
  std::mt19937 rng(6);
  // The host execution runs the same kernels over draft-1m's smaller matrices (under the
  // sanitizers with bf16 pages only).
  const Model& model = test::shared_backend(test::model_dir(test::host_execution() ? "draft-1m" : "target-16m")).model();
  for (KvDType kv : {KvDType::kF32, KvDType::kBF16}) {
    if (test::host_execution() && test::kSanitized && kv == KvDType::kF32) continue;
    INFO("KV pages " << name_of(kv));
    const auto gpu = cuda_backend(model, kv);
    const int vocab = model.config().vocab_size;
    test::Engine e(*gpu, 16, 4096);
    const auto tok = [&] { return std::uniform_int_distribution<int>(3, vocab - 1)(rng); };
    std::vector<int> prompt(37), positions(37);
    for (int& t : prompt) t = tok();
    std::iota(positions.begin(), positions.end(), 0);
    const int base = e.cache.create();
    std::vector<float> last(static_cast<std::size_t>(vocab));
    e.forward(base, {prompt, positions, {}, false}, last);
    const std::vector<int> subject = {11}, subject_pos = {37};
    const int alone_seq = e.cache.fork(base);
    std::vector<float> alone(static_cast<std::size_t>(vocab));
    e.forward(alone_seq, {subject, subject_pos, {}, true}, alone);

    // Row counts 1-256; each batch twice on fresh sequences (the second replays its graph where
    // the step is captured): the subject's decode row first, then prefill chunks of new
    // sequences (their last row's logits), trees of 3 and decode rows of forks (all logits).
    for (int rows : {1, 2, 3, 8, 13, 32, 64, 65, 256})
      for (int round = 0; round < 2; ++round) {
        INFO(rows << " rows, round " << round);
        std::vector<std::vector<int>> tokens, pos, par;
        std::vector<RowLogits> wanted = {RowLogits::kAll};
        std::vector<int> seqs = {e.cache.fork(base)};
        tokens.push_back(subject), pos.push_back(subject_pos), par.push_back({});
        std::mt19937 shape(static_cast<unsigned>(rows));  // the same batch shape in both rounds
        for (int used = 1, kind = 0; used < rows; ++kind) {
          const int left = rows - used;
          if (kind % 3 == 0) {
            const int chunk = std::min(left, std::uniform_int_distribution<int>(1, 40)(shape));
            seqs.push_back(e.cache.create());
            tokens.emplace_back(), pos.emplace_back(), par.push_back({});
            for (int i = 0; i < chunk; ++i) tokens.back().push_back(tok()), pos.back().push_back(i);
            wanted.push_back(RowLogits::kLast);
            used += chunk;
          } else if (kind % 3 == 1 && left >= 3) {
            seqs.push_back(e.cache.fork(base));
            tokens.push_back({tok(), tok(), tok()}), pos.push_back({37, 38, 38}), par.push_back({-1, 0, 0});
            wanted.push_back(RowLogits::kAll);
            used += 3;
          } else {
            seqs.push_back(e.cache.fork(base));
            tokens.push_back({tok()}), pos.push_back({37}), par.push_back({});
            wanted.push_back(RowLogits::kAll);
            used += 1;
          }
        }
        std::vector<SequenceRows> parts;
        for (std::size_t i = 0; i < seqs.size(); ++i)
          parts.push_back(SequenceRows{seqs[i], tokens[i], pos[i], par[i], wanted[i]});
        std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * vocab);
        e.context().run(parts, logits);
        CHECK(std::memcmp(logits.data(), alone.data(), alone.size() * sizeof(float)) == 0);
        for (int s : seqs) e.cache.free(s);
      }

    // The prompt prefilled in chunks of 5, 13 and 19 rows, each beside another sequence's decode
    // row: the same cache, so the subject's decode row gives the same logits.
    const int chunked = e.cache.create();
    int at = 0;
    for (int chunk : {5, 13, 19}) {
      const int other = e.cache.fork(base);
      const std::vector<int> other_token = {tok()};
      const std::vector<SequenceRows> parts = {
          SequenceRows{chunked, std::span(prompt).subspan(at, chunk), std::span(positions).subspan(at, chunk), {},
                       RowLogits::kLast},
          SequenceRows{other, other_token, subject_pos, {}, RowLogits::kLast}};
      std::vector<float> logits(2 * static_cast<std::size_t>(vocab));
      e.context().run(parts, logits);
      e.cache.free(other);
      at += chunk;
    }
    std::vector<float> after_chunks(static_cast<std::size_t>(vocab));
    e.forward(chunked, {subject, subject_pos, {}, true}, after_chunks);
    CHECK(std::memcmp(after_chunks.data(), alone.data(), alone.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cuda backend: a workspace holds at most max_graphs graphs and drops those of caches that are gone",
          "[gpu]") {
  REQUIRE_GPU();
  const Model& model = test::shared_backend(test::model_dir("draft-1m")).model();
  cuda::CudaOptions options;
  options.max_graphs = 8;
  const auto gpu = cuda::make_cuda_backend(model, std::nullopt, options);
  const auto workspace = gpu->make_workspace();
  const int vocab = model.config().vocab_size;
  std::vector<float> logits(10 * static_cast<std::size_t>(vocab));
  const std::size_t before = cuda::cuda_live_graphs();
  const std::vector<int> tokens(10, 7);
  std::vector<int> positions(10);
  std::iota(positions.begin(), positions.end(), 0);
  // A new cache each time, its step captured: the graphs of the caches before it are gone.
  for (int round = 0; round < 4; ++round) {
    KvCache cache(gpu->kv_layout(16), 4);
    const ForwardContext ctx{*gpu, cache, *workspace};
    ctx.run(SequenceRows{cache.create(), std::span(tokens).first(3), std::span(positions).first(3), {}, RowLogits::kLast},
            std::span(logits).first(vocab));
    CHECK(cuda::cuda_live_graphs() == before + 1);
  }
  // One cache, 19 step shapes (1-10 rows, all or the last row's logits): 8 kept.
  KvCache cache(gpu->kv_layout(16), 16);
  const ForwardContext ctx{*gpu, cache, *workspace};
  for (int rows = 1; rows <= 10; ++rows)
    for (RowLogits wanted : {RowLogits::kLast, RowLogits::kAll}) {
      const int seq = cache.create();
      const SequenceRows part{seq, std::span(tokens).first(rows), std::span(positions).first(rows), {}, wanted};
      ctx.run(part, std::span(logits).first(static_cast<std::size_t>(logit_rows(std::span(&part, 1))) * vocab));
      cache.free(seq);
      CHECK(cuda::cuda_live_graphs() - before <= 8);
    }
  CHECK(cuda::cuda_live_graphs() - before == 8);
}

namespace {

// Greedy continuations of `backend` against the Hugging Face reference of model `name`, each
// prompt compared until its top-2 logit gap falls under the bf16 bound (from there a bf16
// rounding may legitimately pick the other token), the `max_prompts` shortest prompts, at most
// `max_steps` steps each. Returns the steps compared.
int check_greedy(const Backend& backend, const std::string& name, std::size_t max_prompts = SIZE_MAX,
                 std::size_t max_steps = SIZE_MAX) {
  std::ifstream in(test::source_path("tests/data/hf-greedy.json"));
  REQUIRE(in);
  const nlohmann::json refs = nlohmann::json::parse(in);
  const int vocab = backend.config().vocab_size;
  int compared = 0;
  std::vector<nlohmann::json> prompts = refs.at("models").at(name);
  std::stable_sort(prompts.begin(), prompts.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.at("prompt_ids").size() < b.at("prompt_ids").size();
  });
  for (std::size_t i = 0; i < std::min(prompts.size(), max_prompts); ++i) {
    const auto& ref = prompts[i];
    INFO(name << " " << ref.at("id").get<std::string>());
    const std::vector<int> prompt = ref.at("prompt_ids").get<std::vector<int>>();
    const std::vector<int> expected = ref.at("new_ids").get<std::vector<int>>();
    test::Engine e(backend, 16, 64);
    const int seq = e.cache.create();
    std::vector<int> positions(prompt.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    e.forward(seq, {prompt, positions, {}, false}, logits);
    for (std::size_t step = 0; step < std::min(expected.size(), max_steps); ++step) {
      std::vector<float> sorted = logits;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] < kBf16Bound * std::max(1.0f, std::fabs(sorted[0]))) break;
      const int token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      INFO("step " << step);
      REQUIRE(token == expected[step]);
      ++compared;
      const std::vector<int> t = {token}, p = {static_cast<int>(prompt.size() + step)};
      e.forward(seq, {t, p, {}, true}, logits);
    }
  }
  return compared;
}

}  // namespace

// The GPU test's rule on the CPU: with the same bf16 matrices the CPU backend's greedy tokens
// equal the reference wherever the gap exceeds the bound (so a GPU failure is the GPU's).
TEST_CASE("cuda backend: the greedy rule holds for bf16 matrices on the CPU", "[engine][cuda]") {
  for (const char* name : {"draft-1m", "draft-4m", "target-16m"}) {
    if (test::kSanitized && std::string(name) != "draft-1m") continue;  // ~45 s under ASan for all three
    const cpu::CpuBackend bf16(test::shared_backend(test::model_dir(name)).model(), MatrixFormat::kBF16);
    const int compared = check_greedy(bf16, name);
    INFO(name << ": " << compared << " greedy steps compared");
    CHECK(compared > 100);
  }
}

TEST_CASE("cuda backend: greedy continuations equal the Hugging Face reference where the top-2 gap exceeds the bound",
          "[gpu]") {
  REQUIRE_GPU();
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) {
    // The host execution, where a prompt's prefill of 150-270 rows takes seconds, compares the
    // first 4 steps of the 2 shortest of the 12 prompts of the draft models (target-16m's
    // logits are held to the CPU backend's by the full-model test); under the sanitizers,
    // draft-1m's shortest.
    if (test::host_execution() && std::string(name) == "target-16m") continue;
    if (test::host_execution() && test::kSanitized && std::string(name) != "draft-1m") continue;
    const auto gpu = cuda_backend(test::shared_backend(test::model_dir(name)).model(), KvDType::kBF16);
    const int compared = test::host_execution() ? check_greedy(*gpu, name, test::kSanitized ? 1 : 2, 4) : check_greedy(*gpu, name);
    INFO(name << ": " << compared << " greedy steps compared");
    CHECK(compared >= (test::host_execution() ? 4 : 100));
  }
}

}  // namespace specula
