// KV pages in bf16 and int8 (kv/page_storage.h) against f32.
//
// Storage: a row written and read back is within the rounding step of its dtype (bf16:
// |x - r| <= 2^-8 |x|, round to nearest of an 8-bit mantissa; int8: |x - r| <= scale / 2 with
// scale = max |x| / 127 over the head, plus f32 rounding of x / scale and scale * q), and block
// and slot copies move the int8 scales with the data.
//
// Attention on random data: the kernels reading bf16 / int8 pages equal the double reference
// reading the same pages (the f32 bound of test_engine_attention.cpp, 2e-5 * max|v|), and
// their distance to f32 pages is within the bound the rounding implies. With per-element key
// errors dk and value errors dv: a score moves by at most D = scale * sum_d |q_d| |dk_d|, so
// each softmax weight by a factor within e^(+-2D), the weights by at most e^(2D) - 1 in l1, and
// the output by at most max_j |dv_j| + (e^(2D) - 1) max_j |v_j| (per head and dimension).
//
// Bundled models: within each mode a row's logits in a verify pass equal the one-row decode
// bitwise, so greedy speculative output equals plain greedy output (model drafter and
// n-grams); against f32 pages, the logits of every prompt position stay within the stated
// max-abs bounds and the argmax agrees at the stated rates (measured values in the test).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/memory.h"
#include "engine/batch.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"
#include "kv/kv_cache.h"
#include "runtime/generate.h"
#include "tests/test_engine_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

constexpr KvDType kRounded[] = {KvDType::kBF16, KvDType::kInt8};

// The largest |x - r| a row of `dtype` may show for element i of head h (see the top).
double rounding_bound(KvDType dtype, const std::vector<float>& row, int head_dim, int i) {
  if (dtype == KvDType::kF32) return 0;
  if (dtype == KvDType::kBF16) return std::ldexp(std::abs(double(row[static_cast<std::size_t>(i)])), -8);
  const int h = i / head_dim;
  float max_abs = 0;
  for (int d = 0; d < head_dim; ++d) max_abs = std::max(max_abs, std::abs(row[static_cast<std::size_t>(h * head_dim + d)]));
  return max_abs / 127.0 * (0.5 + 1e-5);
}

}  // namespace

// Pages come from calloc (ZeroedFloats): zero in every dtype without being written (the int8
// scales too), and a 1 GiB array reads as zeros (fresh pages, touched only where read).
TEST_CASE("kv pages start zeroed in every dtype", "[kv][kvdtype]") {
  for (KvDType dtype : {KvDType::kF32, KvDType::kBF16, KvDType::kInt8}) {
    INFO(name_of(dtype));
    const int heads = 2, head_dim = 8, bs = 4, blocks = 5;
    PageStorage pages(KvLayout{2, heads, head_dim, bs, dtype}, blocks);
    std::vector<float> row(static_cast<std::size_t>(heads * head_dim), 1.0f);
    pages.write_row(1, 0, 3, row.data());
    for (int l = 0; l < 2; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int slot = 0; slot < blocks * bs; ++slot) {
          if (l == 1 && kv == 0 && slot == 3) continue;
          std::vector<float> out(row.size(), -1.0f);
          pages.read_row(l, kv, slot, out.data());
          CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
        }
  }
  const ZeroedFloats big(std::size_t{1} << 28);
  REQUIRE(big.size() == std::size_t{1} << 28);
  for (std::size_t i = 0; i < big.size(); i += 1u << 20) CHECK(big.data()[i] == 0.0f);
  CHECK(ZeroedFloats().data() == nullptr);
}

TEST_CASE("kv pages in bf16 and int8: rows within the rounding step, copies move data and scales", "[kv][kvdtype]") {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int layers = 2, heads = 3, head_dim = 8, bs = 4, blocks = 6;
  for (KvDType dtype : {KvDType::kF32, KvDType::kBF16, KvDType::kInt8}) {
    INFO(name_of(dtype));
    PageStorage pages(KvLayout{layers, heads, head_dim, bs, dtype}, blocks);
    const int kv_dim = heads * head_dim;
    // rows[l][kv][slot]: what was written; one head is all zeros (int8 scale 0).
    std::vector<float> rows(static_cast<std::size_t>(layers * 2 * blocks * bs * kv_dim));
    const auto at = [&](int l, int kv, int slot) { return &rows[((std::size_t(l) * 2 + kv) * blocks * bs + slot) * kv_dim]; };
    for (int l = 0; l < layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int slot = 0; slot < blocks * bs; ++slot) {
          float* r = at(l, kv, slot);
          for (int i = 0; i < kv_dim; ++i) r[i] = slot % 5 == 0 && i < head_dim ? 0.0f : normal(rng);
          pages.write_row(l, kv, slot, r);
        }
    const auto read = [&](int l, int kv, int slot) {
      std::vector<float> out(static_cast<std::size_t>(kv_dim));
      pages.read_row(l, kv, slot, out.data());
      return out;
    };
    double worst_ratio = 0;  // error / bound over every element
    bool exact_zero = true;
    for (int l = 0; l < layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int slot = 0; slot < blocks * bs; ++slot) {
          const std::vector<float> written(at(l, kv, slot), at(l, kv, slot) + kv_dim), back = read(l, kv, slot);
          for (int i = 0; i < kv_dim; ++i) {
            const double err = std::abs(double(back[i]) - written[i]), bound = rounding_bound(dtype, written, head_dim, i);
            if (bound == 0) {
              exact_zero = exact_zero && err == 0;
            } else {
              worst_ratio = std::max(worst_ratio, err / bound);
            }
          }
        }
    CHECK(exact_zero);
    CHECK(worst_ratio <= 1.0);
    if (dtype != KvDType::kF32) CHECK(worst_ratio > 0.5);  // the bound is the step, not a loose multiple

    // Copies: block 1 -> 4, then slot 2 -> 21 (block 5): read back bitwise as the sources were.
    std::vector<std::vector<float>> block1, slot2;
    for (int l = 0; l < layers; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        for (int r = 0; r < bs; ++r) block1.push_back(read(l, kv, bs + r));
        slot2.push_back(read(l, kv, 2));
      }
    pages.execute(std::vector<KvCopy>{{KvCopy::Kind::kBlock, 1, 4}, {KvCopy::Kind::kSlot, 2, 21}});
    std::size_t b = 0, s = 0;
    for (int l = 0; l < layers; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        for (int r = 0; r < bs; ++r) CHECK(read(l, kv, 4 * bs + r) == block1[b++]);
        CHECK(read(l, kv, 21) == slot2[s++]);
        CHECK(read(l, kv, 20) != slot2[s - 1]);  // the neighbour slot kept its own row
      }
  }
  KvCache int8_cache(KvLayout{1, 1, 8, 4, KvDType::kInt8}, 2);
  const int seq = int8_cache.create();
  int8_cache.append_slots(seq, 1);
  CHECK_THROWS_WITH(int8_cache.key(seq, 0, 0), Catch::Contains("f32 rows") && Catch::Contains("int8"));
}

// A mixed batch (a causal chunk, a tree, a tree's second level) over a shuffled pool, the same
// random rows in f32 pages and in pages of each rounded dtype, on each instruction set.
TEST_CASE("attention on bf16 and int8 pages: equal to the reference on the same pages, within the rounding bound of f32",
          "[engine][attention][kvdtype]") {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ModelConfig config;
  config.vocab_size = 16;
  config.max_position_embeddings = 512;
  const int bs = 5;
  for (const cpu::AttentionShape shape : {cpu::AttentionShape{6, 2, 16}, cpu::AttentionShape{4, 1, 36}}) {
    const int kv_dim = shape.num_kv_heads * shape.head_dim, group = shape.num_heads / shape.num_kv_heads;
    for (KvDType dtype : kRounded)
      for (cpu::MatmulIsa isa : cpu::supported_matmul_isas()) {
        INFO(name_of(dtype) << ", " << cpu::isa_name(isa) << ", head_dim " << shape.head_dim);
        KvCache exact(KvLayout{1, shape.num_kv_heads, shape.head_dim, bs, KvDType::kF32}, 64);
        KvCache rounded(KvLayout{1, shape.num_kv_heads, shape.head_dim, bs, dtype}, 64);
        RaggedBatch batch;
        KvPlan plans[2];
        KvCache* caches[2] = {&exact, &rounded};
        for (int c = 0; c < 2; ++c) {  // the same operations: the same slots in both
          KvCache& cache = *caches[c];
          const int a = cache.create(), b = cache.create(), d = cache.create();
          cache.append_slots(a, 37);
          cache.append_slots(b, 12);
          cache.append_slots(d, 20);
          const std::vector<int> chunk(4, 1), chunk_pos = {37, 38, 39, 40};
          const std::vector<int> tree(5, 1), tree_pos = {12, 13, 13, 14, 12}, tree_parents = {-1, 0, 0, 2, -1};
          const std::vector<int> level(2, 1), level_pos = {19, 20}, level_parents = {-1, 0, 0, 1, 2};
          const std::vector<SequenceRows> parts = {{a, chunk, chunk_pos, {}, RowLogits::kAll},
                                                   {b, tree, tree_pos, tree_parents, RowLogits::kAll},
                                                   {d, level, level_pos, level_parents, RowLogits::kAll}};
          batch = plan_batch(parts, cache.tables(), config);
          plans[c] = cache.prepare(batch.seqs, batch.rows_per_seq());
        }
        REQUIRE(plans[0].row_slots == plans[1].row_slots);
        // Every slot of the pool: exact f32 rows, and their rounded twins.
        const int slots = 64 * bs;
        std::vector<float> written(static_cast<std::size_t>(2 * slots * kv_dim));
        for (int kv = 0; kv < 2; ++kv)
          for (int slot = 0; slot < slots; ++slot) {
            float* r = &written[(std::size_t(kv) * slots + slot) * kv_dim];
            for (int i = 0; i < kv_dim; ++i) r[i] = normal(rng);
            exact.storage().write_row(0, kv, slot, r);
            rounded.storage().write_row(0, kv, slot, r);
          }
        // Per kv head and dimension: max_j |dv_j|, max_j |v_j|; per slot and kv head the key errors.
        std::vector<float> back(static_cast<std::size_t>(kv_dim));
        std::vector<double> max_dv(static_cast<std::size_t>(kv_dim), 0), max_v(static_cast<std::size_t>(kv_dim), 0);
        std::vector<double> dk(static_cast<std::size_t>(slots * kv_dim));
        for (int slot = 0; slot < slots; ++slot)
          for (int kv = 0; kv < 2; ++kv) {
            rounded.storage().read_row(0, kv, slot, back.data());
            const float* w = &written[(std::size_t(kv) * slots + slot) * kv_dim];
            for (int i = 0; i < kv_dim; ++i) {
              const double e = std::abs(double(back[i]) - w[i]);
              if (kv == 0) dk[std::size_t(slot) * kv_dim + i] = e;
              if (kv == 1) {
                max_dv[i] = std::max(max_dv[i], e);
                max_v[i] = std::max(max_v[i], std::abs(double(w[i])));
              }
            }
          }
        double max_value = *std::max_element(max_v.begin(), max_v.end());
        const std::size_t width = static_cast<std::size_t>(shape.num_heads * shape.head_dim);
        std::vector<float> q(width * batch.num_rows()), out(q.size(), std::nanf("")), ref(q.size()), f32(q.size());
        for (float& v : q) v = normal(rng);
        cpu::AttentionScratch scratch;
        cpu::attend_batch(isa, batch, plans[1], rounded.storage(), 0, shape, q.data(), out.data(), scratch);
        cpu::attend_batch_reference(batch, plans[1], rounded.storage(), 0, shape, q.data(), ref.data());
        cpu::attend_batch_reference(batch, plans[0], exact.storage(), 0, shape, q.data(), f32.data());
        double worst_ref = 0, worst_ratio = 0, worst_f32 = 0;
        const double scale = 1.0 / std::sqrt(double(shape.head_dim));
        for (int r = 0; r < batch.num_rows(); ++r)
          for (int h = 0; h < shape.num_heads; ++h) {
            const int offset = (h / group) * shape.head_dim;
            const float* qh = &q[r * width + std::size_t(h) * shape.head_dim];
            double score_shift = 0;  // D over every slot of the pool (a superset of the visible keys)
            for (int slot = 0; slot < slots; ++slot) {
              double shift = 0;
              for (int d = 0; d < shape.head_dim; ++d) shift += std::abs(double(qh[d])) * dk[std::size_t(slot) * kv_dim + offset + d];
              score_shift = std::max(score_shift, shift * scale);
            }
            for (int d = 0; d < shape.head_dim; ++d) {
              const std::size_t i = r * width + std::size_t(h) * shape.head_dim + d;
              worst_ref = std::max(worst_ref, double(std::abs(out[i] - ref[i])));
              const double bound = max_dv[offset + d] + std::expm1(2 * score_shift) * max_v[offset + d] + 2e-5 * max_value;
              const double err = std::abs(double(out[i]) - f32[i]);
              worst_f32 = std::max(worst_f32, err);
              worst_ratio = std::max(worst_ratio, err / bound);
            }
          }
        INFO("max |rounded - f32| " << worst_f32 << ", worst error / bound " << worst_ratio);
        CHECK(worst_ref <= 2e-5 * max_value);
        CHECK(worst_ratio <= 1.0);
        CHECK(worst_f32 > 0);  // the rounding is there
      }
  }
}

namespace {

GenerateOptions kv_options(const std::vector<int>& prompt, KvDType dtype, int max_new_tokens) {
  GenerateOptions o;
  o.model_dir = test::model_dir("target-16m");
  o.prompt_ids = prompt;
  o.max_new_tokens = max_new_tokens;
  o.kv_dtype = dtype;
  return o;
}

}  // namespace

// A chain of tokens verified in one pass (tree rows, all logits) against the same tokens decoded
// one row at a time, in each rounded mode: bitwise equal logits.
TEST_CASE("kv pages in bf16 and int8: a verify pass equals one-row decodes bitwise", "[engine][kvdtype]") {
  const Backend& backend = test::store().get(test::model_dir("target-16m"));
  const int vocab = backend.config().vocab_size;
  const std::vector<int> prompt = test::reference_prompts()[1];
  const std::vector<int> chain = {17, 99, 254, 3, 77};
  const int n = static_cast<int>(prompt.size()), m = static_cast<int>(chain.size());
  for (KvDType dtype : kRounded) {
    INFO(name_of(dtype));
    KvLayout layout = backend.kv_layout(16);
    layout.dtype = dtype;
    test::Engine e(backend, layout, 64);
    std::vector<int> positions(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = i;
    std::vector<float> last(static_cast<std::size_t>(vocab));
    const int one = e.cache.create();
    e.forward(one, {prompt, positions, {}, false}, last);
    const int pass = e.cache.fork(one);
    std::vector<float> decoded(static_cast<std::size_t>(m) * vocab), verified(decoded.size());
    for (int i = 0; i < m; ++i) {
      const std::vector<int> t = {chain[static_cast<std::size_t>(i)]}, p = {n + i};
      e.forward(one, {t, p, {}, true}, std::span(decoded).subspan(static_cast<std::size_t>(i) * vocab, vocab));
    }
    std::vector<int> tree_pos(static_cast<std::size_t>(m)), parents(static_cast<std::size_t>(m));
    for (int i = 0; i < m; ++i) {
      tree_pos[static_cast<std::size_t>(i)] = n + i;
      parents[static_cast<std::size_t>(i)] = i - 1;
    }
    e.forward(pass, {chain, tree_pos, parents, true}, verified);
    CHECK(std::memcmp(decoded.data(), verified.data(), decoded.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("kv pages in bf16 and int8: greedy speculative output equals plain greedy output in each mode",
          "[runtime][speculative][kvdtype]") {
  DraftOptions ngram;
  ngram.method = DraftMethod::kNgram;
  ngram.gamma = 4;
  const DraftOptions drafters[] = {test::model_draft("draft-1m", 3, {}, 0, false), ngram,
                                   test::model_draft("draft-1m", 3, {2, 2}, 0, false)};
  const auto prompts = test::reference_prompts();
  const int tokens = test::kSanitized ? 16 : 32;
  for (KvDType dtype : kRounded) {
    const std::size_t i = dtype == KvDType::kBF16 ? 0 : 5;  // a python and a c prompt
    const GenerateOptions plain = kv_options(prompts[i], dtype, tokens);
    const auto expected = generate(test::store(), plain);
    CHECK(expected["stats"]["kv"]["dtype"] == name_of(dtype));
    for (const DraftOptions& d : drafters) {
      INFO(name_of(dtype) << ", prompt " << i << ", " << name_of(d.method) << " gamma " << d.gamma);
      GenerateOptions spec = plain;
      spec.draft = d;
      const auto result = generate(test::store(), spec);
      CHECK(result["ids"] == expected["ids"]);
      CHECK(result["stats"]["kv"]["blocks_in_use_at_end"] == 0);
    }
  }
}

// Logits of every position of three reference prompts (one causal prefill, 709 positions; the
// sanitizer build takes the first, 216) with f32 pages and with rounded pages, on each bundled
// model. Measured (max |logit difference|, argmax agreement): bf16 0.064 / 99.9% (target-16m),
// 0.045 / 100% (draft-4m), 0.125 / 100% (draft-1m); int8 0.19 / 99.6%, 0.18 / 99.3%, 0.49 /
// 99.7%. The bounds leave a factor of ~3 on the error and a few flipped near-ties on the agreement.
TEST_CASE("kv pages in bf16 and int8: logits of the bundled models against f32 pages", "[engine][kvdtype]") {
  const auto prompts = test::reference_prompts();
  const std::vector<std::size_t> chosen =
      test::kSanitized ? std::vector<std::size_t>{0} : std::vector<std::size_t>{0, 4, 8};
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) {
    const Backend& backend = test::store().get(test::model_dir(name));
    const int vocab = backend.config().vocab_size;
    // Per rounded dtype: max |difference|, argmax agreements; positions compared.
    double worst[2] = {0, 0};
    int agree[2] = {0, 0}, compared = 0;
    for (std::size_t p : chosen) {
      const std::vector<int>& prompt = prompts[p];
      const int n = static_cast<int>(prompt.size());
      std::vector<int> positions(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = i;
      const auto logits_in = [&](KvDType dtype) {
        KvLayout layout = backend.kv_layout(16);
        layout.dtype = dtype;
        test::Engine e(backend, layout, 32);
        std::vector<float> logits(static_cast<std::size_t>(n) * vocab);
        e.forward(e.cache.create(), {prompt, positions, {}, true}, logits);
        return logits;
      };
      const std::vector<float> f32 = logits_in(KvDType::kF32);
      for (int k = 0; k < 2; ++k) {
        const std::vector<float> rounded = logits_in(kRounded[k]);
        for (int i = 0; i < n; ++i) {
          const float* a = &f32[static_cast<std::size_t>(i) * vocab];
          const float* b = &rounded[static_cast<std::size_t>(i) * vocab];
          for (int v = 0; v < vocab; ++v) worst[k] = std::max(worst[k], double(std::abs(a[v] - b[v])));
          agree[k] += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
        }
      }
      compared += n;
    }
    for (int k = 0; k < 2; ++k) {
      const bool bf16 = kRounded[k] == KvDType::kBF16;
      const double rate = double(agree[k]) / compared;
      INFO(name << ", " << name_of(kRounded[k]) << ": max |logit - f32's| " << worst[k] << ", argmax agreement "
                << agree[k] << "/" << compared);
      CHECK(worst[k] > 0);
      CHECK(worst[k] <= (bf16 ? 0.4 : 1.5));
      CHECK(rate >= (bf16 ? 0.98 : 0.97));
    }
  }
}

}  // namespace specula
