// The CUDA backend's host side, on the CPU (no GPU needed; also in the ASan build without
// CUDA): the refusals of what the kernels do not handle, the weight arena, the memory plan and
// its too-small refusal, the step upload against the CPU's own visibility rule (visible_rows),
// graph keys, the copy list, device-resident page storage, and the refusal of `--backend cuda`
// where there is no GPU.
#include <catch2/catch.hpp>
#include <numeric>
#include <random>
#include <set>

#include "base/error.h"
#include "engine/backend.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_plan.h"
#include "engine/cuda/device.h"
#include "engine/forward.h"
#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

using cuda::CudaOptions;

const Model& model_of(const char* name) { return test::shared_backend(test::model_dir(name)).model(); }

}  // namespace

TEST_CASE("cuda plan: refusals of dtypes and shapes the kernels do not handle", "[engine][cuda]") {
  const ModelConfig good = model_of("draft-1m").config();
  CHECK_NOTHROW(cuda::check_cuda_support(good, std::nullopt, {}));
  CHECK_NOTHROW(cuda::check_cuda_support(good, MatrixFormat::kBF16, {}));
  CHECK_THROWS_WITH(cuda::check_cuda_support(good, MatrixFormat::kF16, {}),
                    Catch::Contains("matrices are read in bf16") && Catch::Contains("; f16 ("));
  CHECK_THROWS_WITH(cuda::check_cuda_support(good, MatrixFormat::kF32, {}), Catch::Contains("; f32 ("));
  // the CPU's product formats
  for (MatrixFormat cpu_format : {MatrixFormat::kInt8, MatrixFormat::kBF16Dot, MatrixFormat::kBF16Amx})
    CHECK_THROWS_WITH(cuda::check_cuda_support(good, cpu_format, {}),
                      Catch::Contains(name_of(cpu_format)) && Catch::Contains("--weights / --draft-weights"));
  CudaOptions f16_pages;
  f16_pages.kv_dtype = KvDType::kInt8;
  CHECK_THROWS_WITH(cuda::check_cuda_support(good, std::nullopt, f16_pages), Catch::Contains("KV pages in int8"));
  CudaOptions no_rows;
  no_rows.max_rows = 0;
  CHECK_THROWS_WITH(cuda::check_cuda_support(good, std::nullopt, no_rows), Catch::Contains("max_rows"));

  ModelConfig odd = good;
  odd.explicit_head_dim = 33;
  CHECK_THROWS_WITH(cuda::check_cuda_support(odd, std::nullopt, {}), Catch::Contains("head_dim 33"));
  ModelConfig wide = good;
  wide.explicit_head_dim = 512;
  CHECK_THROWS_WITH(cuda::check_cuda_support(wide, std::nullopt, {}), Catch::Contains("head_dim 512"));
  ModelConfig ragged = good;
  ragged.intermediate_size = good.intermediate_size + 4;
  CHECK_THROWS_WITH(cuda::check_cuda_support(ragged, std::nullopt, {}),
                    Catch::Contains("intermediate_size") && Catch::Contains("multiple of 8"));
}

TEST_CASE("cuda plan: the weight arena holds every tensor once, aligned, fused as the kernels read it",
          "[engine][cuda]") {
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) {
    INFO(name);
    const Model& model = model_of(name);
    const ModelConfig& c = model.config();
    const cuda::WeightPlan plan = cuda::plan_weights(model);
    std::size_t end = 0;
    for (const cuda::WeightTensor& t : plan.tensors) {
      INFO(t.name);
      CHECK(t.offset % cuda::kAlign == 0);
      CHECK(t.offset >= end);  // in order, no overlap
      end = t.offset + t.bytes();
    }
    CHECK(plan.arena_bytes >= end);
    REQUIRE(plan.layers.size() == static_cast<std::size_t>(c.num_hidden_layers));
    const cuda::WeightTensor& qkv = plan.tensors[static_cast<std::size_t>(plan.layers[0].qkv)];
    CHECK(qkv.rows == c.q_dim() + 2 * c.kv_dim());
    CHECK(qkv.cols == c.hidden_size);
    CHECK(qkv.dtype == DType::BF16);
    const cuda::WeightTensor& gate_up = plan.tensors[static_cast<std::size_t>(plan.layers[0].gate_up)];
    CHECK(gate_up.rows == 2 * c.intermediate_size);
    CHECK(plan.layers[0].qkv_bias == -1);  // LLaMA: no biases
    CHECK(plan.tensors[static_cast<std::size_t>(plan.embed)].dtype == model.embed_tokens().dtype);
    // What a decode step reads: the same bytes the CPU backend reads with bf16 matrices.
    const cpu::CpuBackend cpu_bf16(model, MatrixFormat::kBF16);
    CHECK(plan.matrix_bytes == cpu_bf16.weight_bytes());
  }
}

TEST_CASE("cuda plan: memory is planned before the first token and a card too small is refused with the sizes",
          "[engine][cuda]") {
  const Model& model = model_of("target-16m");
  const cuda::WeightPlan weights = cuda::plan_weights(model);
  const CudaOptions options;
  const std::size_t ws = cuda::workspace_bytes(model.config(), options);
  CudaOptions fewer_rows = options;
  fewer_rows.max_rows = 64;
  CHECK(cuda::workspace_bytes(model.config(), fewer_rows) < ws);
  // An activation buffer per row at least: x, h, qkv, attention, gate|up, act.
  const ModelConfig& c = model.config();
  CHECK(ws > static_cast<std::size_t>(options.max_rows) * 4 *
                 (2 * c.hidden_size + c.q_dim() + 2 * c.kv_dim() + c.q_dim() + 3 * c.intermediate_size));

  const std::size_t gib = std::size_t{1} << 30;
  const cuda::MemoryPlan fits = cuda::plan_memory(weights, c, options, 10 * gib, 16 * gib);
  CHECK(fits.weights == weights.arena_bytes);
  CHECK(fits.workspace == ws);
  CHECK(fits.kv_pool == (10 * gib - weights.arena_bytes - ws) / 10 * 9);
  CHECK(fits.total() <= 10 * gib);

  CudaOptions pool = options;
  pool.kv_pool_bytes = 2 * gib;
  CHECK(cuda::plan_memory(weights, c, pool, 10 * gib, 16 * gib).kv_pool == 2 * gib);
  CHECK_THROWS_AS(cuda::plan_memory(weights, c, pool, gib, 16 * gib), ResourceExhausted);
  CHECK_THROWS_WITH(cuda::plan_memory(weights, c, pool, gib, 16 * gib),
                    Catch::Contains("does not fit") && Catch::Contains("weights") && Catch::Contains("workspace") &&
                        Catch::Contains("KV pool 2048 MiB") && Catch::Contains("1024 MiB free of 16384 MiB"));
  // Weights and workspace alone over the free memory.
  CHECK_THROWS_AS(cuda::plan_memory(weights, c, options, weights.arena_bytes, 16 * gib), ResourceExhausted);
  // Room for the fixed part but not a 1 MiB pool.
  CHECK_THROWS_WITH(cuda::plan_memory(weights, c, options, weights.arena_bytes + ws + 1000, 16 * gib),
                    Catch::Contains("no room for a KV pool"));
}

namespace {

// A batch of every kind over a host cache: a prefill chunk, a decode row, a one-shot tree, a
// level of a tree grown over cached nodes; returns the planned batch and plan.
struct MixedBatch {
  KvCache cache;
  RaggedBatch batch;
  KvPlan plan;
  std::vector<std::vector<int>> tokens, positions, parents;
};

std::unique_ptr<MixedBatch> mixed_batch(const Backend& backend, int block_size, std::mt19937& rng) {
  auto m = std::make_unique<MixedBatch>(MixedBatch{KvCache(backend.model().kv_layout(block_size), 256), {}, {}, {}, {}, {}});
  const int vocab = backend.config().vocab_size;
  std::unique_ptr<Workspace> ws = backend.make_workspace();
  const ForwardContext ctx{backend, m->cache, *ws};
  const auto tok = [&] { return std::uniform_int_distribution<int>(3, vocab - 1)(rng); };
  std::vector<int> seqs;
  std::vector<int> lengths = {7, 20, 33, 12};
  for (int len : lengths) {  // cached prefixes
    std::vector<int> t(static_cast<std::size_t>(len)), p(t.size());
    for (int& x : t) x = tok();
    std::iota(p.begin(), p.end(), 0);
    seqs.push_back(m->cache.create());
    std::vector<float> last(static_cast<std::size_t>(vocab));
    ctx.run(SequenceRows{seqs.back(), t, p, {}, RowLogits::kLast}, last);
  }
  {  // the grown tree's first level (2 nodes) on sequence 3
    const std::vector<int> t = {tok(), tok()}, p = {12, 12}, par = {-1, -1};
    std::vector<float> logits(2 * static_cast<std::size_t>(vocab));
    ctx.run(SequenceRows{seqs[3], t, p, par, RowLogits::kAll}, logits);
  }
  m->tokens = {{tok(), tok(), tok(), tok(), tok()}, {tok()}, {tok(), tok(), tok()}, {tok(), tok()}};
  m->positions = {{7, 8, 9, 10, 11}, {20}, {33, 34, 34}, {13, 14}};
  m->parents = {{}, {}, {-1, 0, 0}, {-1, -1, 0, 2}};
  std::vector<SequenceRows> parts;
  for (std::size_t i = 0; i < seqs.size(); ++i)
    parts.push_back(SequenceRows{seqs[i], m->tokens[i], m->positions[i], m->parents[i],
                                 i == 1 ? RowLogits::kLast : RowLogits::kAll});
  m->batch = plan_batch(parts, m->cache.tables(), backend.config());
  m->plan = m->cache.prepare(m->batch.seqs, m->batch.rows_per_seq());
  return m;
}

}  // namespace

TEST_CASE("cuda plan: the step upload names the same keys, in the same order, as the CPU's visible_rows",
          "[engine][cuda]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  std::mt19937 rng(7);
  for (int block_size : {1, 4, 16}) {
    for (int window : {0, 3, 9}) {
      INFO("block size " << block_size << ", window " << window);
      auto m = mixed_batch(backend, block_size, rng);
      const RaggedBatch& b = m->batch;
      const cuda::StepUpload up = cuda::pack_step(b, m->plan, window, CudaOptions{}, 42);
      REQUIRE(up.data.size() == up.layout.size);
      const auto* rows = reinterpret_cast<const cuda::RowDesc*>(up.data.data() + up.layout.rows);
      const int* pages = up.data.data() + up.layout.pages;
      const int* mask = up.data.data() + up.layout.mask;
      const PageStorage& storage = m->cache.storage();
      int max_keys = 0;
      for (int s = 0; s < b.num_seqs(); ++s)
        for (int r = b.row_indptr[static_cast<std::size_t>(s)]; r < b.row_indptr[static_cast<std::size_t>(s) + 1]; ++r) {
          INFO("row " << r);
          const cuda::RowDesc& d = rows[r];
          CHECK(d.token == b.tokens[static_cast<std::size_t>(r)]);
          CHECK(d.position == b.positions[static_cast<std::size_t>(r)]);
          CHECK(d.slot == m->plan.row_slots[static_cast<std::size_t>(r)]);
          const cpu::PagedRows cpu_keys = cpu::visible_rows(b, m->plan, storage, 0, 0, s, r, window);
          const int num_keys = d.prefix_len + d.num_extra - d.first;
          REQUIRE(num_keys == cpu_keys.num_keys());
          max_keys = std::max(max_keys, num_keys);
          for (int j = 0; j < num_keys; ++j) {
            const int e = d.first + j;
            const int slot = e < d.prefix_len ? e : mask[d.extra_begin + e - d.prefix_len];
            const int physical = pages[d.pages_begin + slot / block_size] * block_size + slot % block_size;
            CHECK(storage.row(0, 0, physical) == cpu_keys.key_row(j));
          }
        }
      CHECK(up.max_keys == max_keys);
      const int* logit_rows = up.data.data() + up.layout.logit_rows;
      CHECK(std::vector<int>(logit_rows, logit_rows + b.num_logits()) == b.logit_rows);
      CHECK(up.key.pages_id == 42);
    }
  }
}

TEST_CASE("cuda plan: graph keys are equal exactly for steps of one shape, and fix the upload's offsets",
          "[engine][cuda]") {
  const Backend& backend = test::shared_backend(test::model_dir("draft-1m"));
  std::mt19937 rng(11);
  auto a = mixed_batch(backend, 16, rng);
  auto b = mixed_batch(backend, 16, rng);  // other tokens, same shape
  const cuda::StepUpload ua = cuda::pack_step(a->batch, a->plan, 0, CudaOptions{}, 1);
  const cuda::StepUpload ub = cuda::pack_step(b->batch, b->plan, 0, CudaOptions{}, 1);
  CHECK(ua.key == ub.key);
  CHECK(ua.key.shape() == ub.key.shape());
  for (int field = 0; field < 6; ++field) {
    cuda::GraphKey other = ua.key;
    int* const ints[] = {&other.num_rows, &other.num_logits, &other.pages_cap, &other.mask_cap, &other.keys_cap};
    if (field < 5) ++*ints[field];
    else ++other.pages_id;
    CHECK(other.shape() != ua.key.shape());
  }
  CHECK(ua.data != ub.data);
  const cuda::StepLayout la = cuda::step_layout(ua.key);
  CHECK(la.pages == ua.layout.pages);
  CHECK(la.logit_rows == ub.layout.logit_rows);
  CHECK(ua.key.pages_cap >= static_cast<int>(a->plan.kv_indices.size()));
  CHECK(ua.key.pages_cap >= 64);
  CHECK((ua.key.pages_cap & (ua.key.pages_cap - 1)) == 0);
  CHECK(ua.key.keys_cap >= ua.max_keys);
  CHECK(ua.key.mask_cap >= static_cast<int>(a->batch.mask_indices.size()));
  // Other device pages, other graph.
  const cuda::StepUpload other_pages = cuda::pack_step(a->batch, a->plan, 0, CudaOptions{}, 2);
  CHECK_FALSE(other_pages.key == ua.key);

  // Decode rows: one key for every step until the page list outgrows its capacity.
  KvCache cache(backend.model().kv_layout(16), 64);
  const int seq = cache.create();
  std::set<std::tuple<int, int, int, int>> keys;
  for (int pos = 0; pos < 40; ++pos) {
    const std::vector<int> t = {5}, p = {pos};
    const RaggedBatch batch = plan_batch(std::vector<SequenceRows>{{seq, t, p, {}, RowLogits::kAll}}, cache.tables(),
                                         backend.config());
    const KvPlan plan = cache.prepare(batch.seqs, batch.rows_per_seq());
    const cuda::StepUpload up = cuda::pack_step(batch, plan, 0, CudaOptions{}, 1);
    keys.insert({up.key.num_rows, up.key.pages_cap, up.key.mask_cap, up.key.keys_cap});
    CHECK(cuda::graph_eligible(up.key, CudaOptions{}));
    CudaOptions no_graphs;
    no_graphs.graphs = false;
    CHECK_FALSE(cuda::graph_eligible(up.key, no_graphs));
  }
  CHECK(keys.size() == 1);  // 40 slots: 3 pages (cap 64), 40 keys (cap 256)
  cuda::GraphKey big;
  big.num_rows = cuda::kSmallRows + 1;
  CHECK_FALSE(cuda::graph_eligible(big, CudaOptions{}));

  CudaOptions few;
  few.max_rows = 4;
  CHECK_THROWS_WITH(cuda::pack_step(a->batch, a->plan, 0, few, 1), Catch::Contains("exceeds the workspace's 4"));
}

TEST_CASE("cuda plan: the key capacity covers every row and a row fits up to the limit the refusal names",
          "[engine][cuda]") {
  for (int keys : {1, 255, 256, 257, 4096, 4097, 16384, 20000, 28672})
    CHECK(cuda::keys_capacity(keys) >= keys);
  CHECK(cuda::keys_capacity(4097) == 8192);
  CHECK(cuda::keys_capacity(20000) == 20480);
  // An H200's opt-in shared memory (227 KiB) with 64-dimensional heads: 28,672 keys, not the
  // 16,384 a power-of-two capacity would allow.
  const std::size_t h200 = 227 * 1024;
  const int limit = cuda::max_attention_keys(h200, 64);
  CHECK(limit == 28672);
  CHECK(cuda::attention_smem_bytes(cuda::keys_capacity(limit), 64) <= h200);
  CHECK(cuda::attention_smem_bytes(cuda::keys_capacity(limit + 1), 64) > h200);
  CHECK(cuda::max_attention_keys(48 * 1024, 128) == 4096);
}

TEST_CASE("cuda plan: copy lists keep their order, and device-resident pages hold no host data and queue copies",
          "[engine][kv][cuda]") {
  const std::vector<KvCopy> copies = {{KvCopy::Kind::kBlock, 3, 5}, {KvCopy::Kind::kSlot, 17, 2}};
  CHECK(cuda::pack_copies(copies) == std::vector<std::int32_t>{0, 3, 5, 1, 17, 2});

  KvLayout layout{2, 2, 8, 4, KvDType::kBF16, true};
  PageStorage pages(layout, 8);
  pages.execute(copies);
  pages.execute(std::vector<KvCopy>{{KvCopy::Kind::kSlot, 1, 0}});
  const std::vector<KvCopy> queued = pages.take_device_copies();
  REQUIRE(queued.size() == 3);
  CHECK(queued[0] == copies[0]);
  CHECK(queued[2] == KvCopy{KvCopy::Kind::kSlot, 1, 0});
  CHECK(pages.take_device_copies().empty());
  CHECK(pages.device_state() == nullptr);
  CHECK(cuda::kv_pages_bytes(layout, 8) == 2u * 8 * 2 * 4 * 16 * 2);

  layout.dtype = KvDType::kInt8;
  CHECK_THROWS_WITH(PageStorage(layout, 8), Catch::Contains("device pages in int8"));

  KvCache cache(KvLayout{2, 2, 8, 4, KvDType::kF32, true}, 8);
  const int seq = cache.create();
  cache.append_slots(seq, 3);
  CHECK_THROWS_WITH(cache.key(seq, 0, 1), Catch::Contains("device memory"));
}

TEST_CASE("cuda backend: refused with one clear error where there is no GPU", "[engine][cuda]") {
  if (cuda_device_count() > 0) {
    WARN("skipped: a GPU is present (the [gpu] tests cover the backend)");
    return;
  }
  const Model& model = model_of("draft-1m");
  CHECK_THROWS_WITH(make_backend(BackendKind::kCuda, model, std::nullopt),
                    Catch::StartsWith("backend 'cuda': ") && Catch::Contains(cuda_unavailable_reason()) &&
                        Catch::Contains("use --backend cpu"));
  const test::Outcome o = test::run_specula("generate --model '" + test::model_dir("draft-1m") +
                                            "' --prompt-ids 1,265 --max-new-tokens 2 --backend cuda");
  INFO("stderr: " << o.err);
  CHECK(o.exited);
  CHECK(o.status == 1);
  CHECK_THAT(o.err, Catch::StartsWith("specula: error: --backend cuda: no usable GPU (") &&
                       Catch::Contains(cuda_unavailable_reason()) && Catch::Contains("use cpu"));
  CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
}

}  // namespace specula
