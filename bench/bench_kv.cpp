// Paged KV cache costs on target-16m's layout (8 layers, kv_dim 128, block size 16):
//  - fork (+ free), a speculative append + rollback (truncate), and a tree commit (append 8
//    scratch slots, keep a 3-node path of which 2 entries move) at sequence lengths 128, 1K and
//    8K. None touches the KV contents of the prefix; fork copies and free walks the block table
//    (length / 16 ints, 512 at 8K), the only part that grows with length.
//  - decode tokens/s of target-16m through the paged cache (block sizes 16 and 64) against one
//    block holding the whole sequence (the contiguous layout the paged cache replaced),
//    interleaved step by step, as a ratio.
//  - attention of one decode row over 2,048 cached positions (target-16m's heads: 6 query, 2
//    key/value, head_dim 64, one layer) with bf16 and int8 pages, interleaved with the same
//    row over f32 pages in the same iterations, in alternating order (the f32 argument is the
//    control: ~1.0): over_f32 is the ratio of the summed times; and
//    decode tokens/s of target-16m at 2,048 context (1,920..2,047, cycling) per KV dtype, the
//    same way against f32 pages.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "bench/bench_support.h"
#include "engine/batch.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"

namespace specula {
namespace {

const KvLayout kTargetLayout{8, 2, 64, 16};

// A cache holding one sequence of `length` slots, with room for the benchmark's extra slots.
struct Filled {
  KvCache cache;
  int seq;
  explicit Filled(int length) : cache(kTargetLayout, length / kTargetLayout.block_size + 8), seq(cache.create()) {
    cache.append_slots(seq, length);
  }
};

// One cache and its sequence decoding greedily from `token`, with the seconds its steps took.
struct GreedyDecoder {
  KvCache cache;
  int seq = 0;
  int token = 13;
  double seconds = 0;

  // One timed decode step (the argmax feeds the next); the sequence is cut back to
  // `rewind_to` slots first when it has reached `wrap_at`. Returns the step's seconds.
  double step(BenchModel& m, std::vector<float>& logits, int wrap_at, int rewind_to) {
    if (cache.length(seq) == wrap_at) cache.truncate(seq, rewind_to);
    const int pos = cache.length(seq);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(cache, seq, std::span(&token, 1), std::span(&pos, 1), RowLogits::kLast, logits);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    seconds += s;
    return s;
  }
};

void BM_ForkFree(benchmark::State& state) {
  Filled f(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    const int child = f.cache.fork(f.seq);
    f.cache.free(child);
  }
}
BENCHMARK(BM_ForkFree)->Arg(128)->Arg(1024)->Arg(8192);

// Four speculative slots appended (crossing into a new block) and rolled back.
void BM_AppendTruncate(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  Filled f(length);
  for (auto _ : state) {
    f.cache.append_slots(f.seq, 4);
    f.cache.truncate(f.seq, length);
  }
}
BENCHMARK(BM_AppendTruncate)->Arg(128)->Arg(1024)->Arg(8192);

// A verification tree of 8 scratch slots; the accepted path {0, 2, 5} moves two entries.
void BM_AppendCommit(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  Filled f(length);
  const std::vector<int> path = {0, 2, 5};
  for (auto _ : state) {
    f.cache.append_slots(f.seq, 8);
    f.cache.commit(f.seq, length, path);
    f.cache.truncate(f.seq, length);
  }
}
BENCHMARK(BM_AppendCommit)->Arg(128)->Arg(1024)->Arg(8192);

// target-16m decoding after a 512-token prompt (context 512..767, cycling) through a paged
// cache of block size state.range(0) and, interleaved in the same iterations, through one
// block holding the whole sequence (the contiguous layout the paged cache replaced), so both
// see the same machine. Reported time is the paged step; paged_over_contiguous is the ratio
// of the summed step times (1.05 = paged decoding 5% slower).
void BM_DecodePagedVsContiguous(benchmark::State& state) {
  BenchModel m(std::string(SPECULA_SOURCE_DIR) + "/models/target-16m");
  const int block_size = static_cast<int>(state.range(0));
  state.SetLabel("block size " + std::to_string(block_size) + " vs one 1024-slot block");
  const std::vector<int> prompt = real_prompt(512);
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));

  GreedyDecoder paged{KvCache(m.kv_layout(block_size), 1024 / block_size + 2)};
  GreedyDecoder contiguous{KvCache(m.kv_layout(1024), 1)};
  for (GreedyDecoder* d : {&paged, &contiguous}) {
    d->seq = d->cache.create();
    m.forward(d->cache, d->seq, prompt, positions, RowLogits::kLast, logits);
  }
  const auto step = [&](GreedyDecoder& d) { return d.step(m, logits, 768, 512); };
  for (auto _ : state) {
    step(contiguous);
    state.SetIterationTime(step(paged));
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["paged_over_contiguous"] = paged.seconds / contiguous.seconds;
}
BENCHMARK(BM_DecodePagedVsContiguous)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond)->UseManualTime();

constexpr int kLongContext = 2048;

// One decode row at position 2047 over a sequence whose slots hold random unit-normal rows, in
// pages of `dtype`.
struct AttentionAtLength {
  KvCache cache;
  RaggedBatch batch;
  KvPlan plan;
  static constexpr cpu::AttentionShape kShape{6, 2, 64};
  std::vector<float> q, out;

  explicit AttentionAtLength(KvDType dtype)
      : cache(KvLayout{1, kShape.num_kv_heads, kShape.head_dim, 16, dtype}, kLongContext / 16 + 1) {
    ModelConfig config;
    config.vocab_size = 16;
    config.max_position_embeddings = kLongContext;
    const int seq = cache.create();
    cache.append_slots(seq, kLongContext - 1);
    const int token = 1, pos = kLongContext - 1;
    const std::vector<SequenceRows> parts = {{seq, std::span(&token, 1), std::span(&pos, 1), {}, RowLogits::kLast}};
    batch = plan_batch(parts, cache.tables(), config);
    plan = cache.prepare(batch.seqs, batch.rows_per_seq());
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(static_cast<std::size_t>(kShape.num_kv_heads * kShape.head_dim));
    for (int slot = 0; slot < cache.storage().num_blocks() * 16; ++slot)
      for (int kv = 0; kv < 2; ++kv) {
        for (float& v : row) v = normal(rng);
        cache.storage().write_row(0, kv, slot, row.data());
      }
    q.resize(static_cast<std::size_t>(kShape.num_heads * kShape.head_dim));
    for (float& v : q) v = normal(rng);
    out.resize(q.size());
  }
  double run(cpu::AttentionScratch& scratch) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::attend_batch(cpu::matmul_isa(), batch, plan, cache.storage(), 0, kShape, q.data(), out.data(), scratch);
    benchmark::DoNotOptimize(out.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

void BM_AttentionLongContext(benchmark::State& state) {
  const KvDType dtype = static_cast<KvDType>(state.range(0));
  state.SetLabel(std::string(name_of(dtype)) + " pages vs f32, 2048 keys, " + cpu::isa_name(cpu::matmul_isa()));
  AttentionAtLength f32(KvDType::kF32), rounded(dtype);
  cpu::AttentionScratch scratch;
  double f32_s = 0, rounded_s = 0;
  bool f32_first = true;  // the order alternates: whichever runs second finds warmer caches
  for (auto _ : state) {
    if (f32_first) f32_s += f32.run(scratch);
    const double s = rounded.run(scratch);
    if (!f32_first) f32_s += f32.run(scratch);
    f32_first = !f32_first;
    rounded_s += s;
    state.SetIterationTime(s);
  }
  state.counters["over_f32"] = rounded_s / f32_s;
}
BENCHMARK(BM_AttentionLongContext)
    ->Arg(static_cast<int>(KvDType::kF32))
    ->Arg(static_cast<int>(KvDType::kBF16))
    ->Arg(static_cast<int>(KvDType::kInt8))
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// target-16m decoding at 1,920..2,047 context (a 1,920-token prompt, then cycling back),
// pages of state.range(0)'s dtype, interleaved step by step with f32 pages (f32 first and
// second in turn).
void BM_DecodeLongContext(benchmark::State& state) {
  BenchModel m(std::string(SPECULA_SOURCE_DIR) + "/models/target-16m");
  const KvDType dtype = static_cast<KvDType>(state.range(0));
  state.SetLabel(std::string(name_of(dtype)) + " pages vs f32, context 1920..2047");
  const int start = kLongContext - 128;
  const std::vector<int> prompt = real_prompt(static_cast<std::size_t>(start));
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));
  const auto layout = [&](KvDType t) {
    KvLayout l = m.kv_layout(16);
    l.dtype = t;
    return l;
  };
  GreedyDecoder f32{KvCache(layout(KvDType::kF32), kLongContext / 16 + 2)}, rounded{KvCache(layout(dtype), kLongContext / 16 + 2)};
  for (GreedyDecoder* d : {&f32, &rounded}) {
    d->seq = d->cache.create();
    m.forward(d->cache, d->seq, prompt, positions, RowLogits::kLast, logits);
  }
  const auto step = [&](GreedyDecoder& d) { return d.step(m, logits, kLongContext, start); };
  bool f32_first = true;  // alternating, as above
  for (auto _ : state) {
    if (f32_first) step(f32);
    state.SetIterationTime(step(rounded));
    if (!f32_first) step(f32);
    f32_first = !f32_first;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["over_f32"] = rounded.seconds / f32.seconds;
}
BENCHMARK(BM_DecodeLongContext)
    ->Arg(static_cast<int>(KvDType::kF32))
    ->Arg(static_cast<int>(KvDType::kBF16))
    ->Arg(static_cast<int>(KvDType::kInt8))
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
