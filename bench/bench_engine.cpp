// Engine throughput on this machine: decode and prefill tokens/s for the three bundled models
// (and $SPECULA_BENCH_MODEL's, if set), a memory-bandwidth probe (memcpy of 256 MiB), and each
// model's decode "floor" (the time to stream its weights once at the probed bandwidth), so
// that decode time per token reads as a ratio to that floor; decode with int8 weights against
// the stored dtype, alternated step by step (BM_DecodeInt8); the verify-forward cost of n rows
// against one; one batched forward of B sequences against B single-sequence forwards; the
// matrix kernel on each instruction set, with an OpenBLAS sgemm baseline on
// target-16m's prefill shapes.
//
// Counters: items_per_second = tokens/s (decode, prefill) or FLOP/s (matmul);
// bytes_per_second = bytes copied per second (bandwidth); floor_us = weight_bytes / traffic
// bandwidth; x_floor = measured time per decode token / floor; x_one_row = verify time / one-row
// time.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "bench/bench_support.h"
#include "engine/cpu/matmul.h"

namespace specula {
namespace {

constexpr std::size_t kProbeBytes = std::size_t(256) << 20;

// Memory traffic of a 256 MiB memcpy (read + write bytes per second), best of 5 copies.
double traffic_bytes_per_second() {
  static const double rate = [] {
    std::vector<char> a(kProbeBytes, 1), b(kProbeBytes, 2);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(b.data(), a.data(), kProbeBytes);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      benchmark::DoNotOptimize(b.data());
      best = std::max(best, 2.0 * kProbeBytes / s);
    }
    return best;
  }();
  return rate;
}

// The models measured: the three bundled ones, then the folder in $SPECULA_BENCH_MODEL if set
// (e.g. one written by `specula make-checkpoint --shape tinyllama-1.1b`, over the bundled
// tokenizer), for speed at sizes where decoding is bound by memory.
std::vector<std::string> bench_models() {
  std::vector<std::string> dirs;
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"})
    dirs.push_back(std::string(SPECULA_SOURCE_DIR) + "/models/" + name);
  if (const char* extra = std::getenv("SPECULA_BENCH_MODEL")) dirs.emplace_back(extra);
  return dirs;
}
const int kLastModel = static_cast<int>(bench_models().size()) - 1;

// Model `index` of bench_models(), labelled with its folder's name.
std::unique_ptr<BenchModel> load_bench_model(benchmark::State& state, int64_t index) {
  const std::string dir = bench_models().at(static_cast<std::size_t>(index));
  state.SetLabel(std::filesystem::path(dir).filename().string());
  return std::make_unique<BenchModel>(dir);
}

void BM_MemcpyBandwidth(benchmark::State& state) {
  std::vector<char> a(kProbeBytes, 1), b(kProbeBytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kProbeBytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kProbeBytes));
  state.counters["traffic_GBps"] = traffic_bytes_per_second() / 1e9;
}
BENCHMARK(BM_MemcpyBandwidth)->Unit(benchmark::kMillisecond);

// One-token decode steps after a 128-token prompt; the context cycles over 128..255 tokens.
void BM_Decode(benchmark::State& state) {
  const auto model = load_bench_model(state, state.range(0));
  BenchModel& m = *model;
  const std::vector<int> prompt = real_prompt(128);
  KvCache cache(m.kv_layout(16), 32);
  const int seq = cache.create();
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));
  m.forward(cache, seq, prompt, positions, RowLogits::kLast, logits);
  int token = 13;
  for (auto _ : state) {
    if (cache.length(seq) == 256) cache.truncate(seq, 128);
    const int pos = cache.length(seq);
    m.forward(cache, seq, std::span(&token, 1), std::span(&pos, 1), RowLogits::kLast, logits);
    token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  state.SetItemsProcessed(state.iterations());
  const double floor_s = static_cast<double>(m.backend->weight_bytes()) / traffic_bytes_per_second();
  state.counters["weight_MB"] = static_cast<double>(m.backend->weight_bytes()) / 1e6;
  state.counters["floor_us"] = floor_s * 1e6;
  // Time per token / floor: the rate floor * iterations / time, inverted.
  state.counters["x_floor"] =
      benchmark::Counter(floor_s, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Decode)->DenseRange(0, kLastModel)->Unit(benchmark::kMicrosecond)->UseRealTime();

// INT8 weights against the stored dtype: each iteration runs one step of `rows` tokens (1: a
// decode step; more: a verify-sized causal chunk, every row's logits) with the model as
// stored, then the same step with its matrices quantised to int8 (engine/cpu/packed_int8.h),
// after the same 128-token prompt, so both are measured alternately in the same minutes. The
// reported time is both steps'; stored_us and int8_us are each one's mean, x_stored =
// stored_us / int8_us (the int8 speedup), int8_x_floor = int8_us / the int8 weights' floor.
void BM_DecodeInt8(benchmark::State& state) {
  const std::string dir = bench_models().at(static_cast<std::size_t>(state.range(0)));
  const int rows = static_cast<int>(state.range(1));
  state.SetLabel(std::filesystem::path(dir).filename().string());
  BenchModel stored(dir), int8(dir, DType::I8);
  struct Stream {
    BenchModel& m;
    KvCache cache;
    int seq;
    std::vector<int> tokens;
    double seconds = 0;
  };
  Stream streams[2] = {{stored, KvCache(stored.kv_layout(16), 32), 0, std::vector<int>(rows, 13)},
                       {int8, KvCache(int8.kv_layout(16), 32), 0, std::vector<int>(rows, 13)}};
  const std::vector<int> prompt = real_prompt(128);
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  const int vocab = stored.config().vocab_size;
  std::vector<float> logits(static_cast<std::size_t>(std::max(rows, 1)) * vocab);
  for (Stream& s : streams) {
    s.seq = s.cache.create();
    s.m.forward(s.cache, s.seq, prompt, positions, RowLogits::kLast, std::span(logits).first(vocab));
  }
  std::vector<int> step_positions(static_cast<std::size_t>(rows));
  for (auto _ : state) {
    double both = 0;
    for (Stream& s : streams) {
      if (s.cache.length(s.seq) + rows > 256) s.cache.truncate(s.seq, 128);
      std::iota(step_positions.begin(), step_positions.end(), s.cache.length(s.seq));
      const auto t0 = std::chrono::steady_clock::now();
      s.m.forward(s.cache, s.seq, s.tokens, step_positions, rows == 1 ? RowLogits::kLast : RowLogits::kAll, logits);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      s.seconds += dt;
      both += dt;
      for (int r = 0; r < rows; ++r)  // the next step's tokens: each row's argmax
        s.tokens[r] = static_cast<int>(std::max_element(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab) -
                                       (logits.begin() + r * vocab));
    }
    state.SetIterationTime(both);
  }
  const double n = static_cast<double>(state.iterations());
  const double stored_s = streams[0].seconds / n, int8_s = streams[1].seconds / n;
  state.counters["stored_us"] = stored_s * 1e6;
  state.counters["int8_us"] = int8_s * 1e6;
  state.counters["x_stored"] = stored_s / int8_s;
  state.counters["int8_weight_MB"] = static_cast<double>(int8.backend->weight_bytes()) / 1e6;
  state.counters["int8_x_floor"] = int8_s / (static_cast<double>(int8.backend->weight_bytes()) / traffic_bytes_per_second());
}
BENCHMARK(BM_DecodeInt8)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kLastModel, 1), {1, 8}})
    ->ArgNames({"model", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// The cost model of speculative decoding: a verify forward of `rows` chained tokens (all
// logits) against a one-token decode, both after a `context`-token prompt of target-16m (and
// of $SPECULA_BENCH_MODEL's model),
// interleaved in every iteration so that both see the same machine. Reported time is the
// verify forward; x_one_row = verify time / one-row time (the r(n) of the speedup model).
void BM_VerifyForward(benchmark::State& state) {
  const auto model = load_bench_model(state, state.range(0));
  BenchModel& m = *model;
  const int context = static_cast<int>(state.range(1)), rows = static_cast<int>(state.range(2));
  const std::vector<int> prompt = real_prompt(static_cast<std::size_t>(context + rows));
  KvCache cache(m.kv_layout(16), (context + rows) / 16 + 2);
  const int seq = cache.create();
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  const std::span<const int> head(prompt.data(), context), head_pos(positions.data(), context);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size) * rows);
  m.forward(cache, seq, head, head_pos, RowLogits::kLast, std::span(logits).first(m.config().vocab_size));
  const std::span<const int> chain(prompt.data() + context, rows), chain_pos(positions.data() + context, rows);
  double verify_s = 0, one_row_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(cache, seq, chain.first(1), chain_pos.first(1), RowLogits::kLast,
              std::span(logits).first(m.config().vocab_size));
    cache.truncate(seq, context);
    const auto t1 = std::chrono::steady_clock::now();
    m.forward(cache, seq, chain, chain_pos, RowLogits::kAll, logits);
    cache.truncate(seq, context);
    const auto t2 = std::chrono::steady_clock::now();
    const double verify = std::chrono::duration<double>(t2 - t1).count();
    one_row_s += std::chrono::duration<double>(t1 - t0).count();
    verify_s += verify;
    state.SetIterationTime(verify);
  }
  state.SetLabel(std::filesystem::path(m.model->dir()).filename().string() + ", context " + std::to_string(context) + ", " +
                 std::to_string(rows) + " rows");
  state.counters["x_one_row"] = verify_s / one_row_s;
}
BENCHMARK(BM_VerifyForward)
    ->ArgsProduct({kLastModel > 2 ? std::vector<int64_t>{0, kLastModel} : std::vector<int64_t>{0}, {128, 512},
                   {1, 2, 4, 8}})
    ->ArgNames({"model", "context", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// The engine seam's batching: one forward of B sequences x 1 decode row (forks of one
// `context`-token prompt of target-16m, each its own next slot) against B single-sequence
// forwards of the same rows, interleaved in every iteration. Reported time is the batched
// step; rows_per_s its rows per second; x_separate = time of the B separate forwards / time of
// the batched one (how much one batched step saves).
void BM_BatchForward(benchmark::State& state) {
  BenchModel m(bench_models().at(0));
  const int context = static_cast<int>(state.range(0)), batch = static_cast<int>(state.range(1));
  const std::size_t vocab = static_cast<std::size_t>(m.config().vocab_size);
  const std::vector<int> prompt = real_prompt(static_cast<std::size_t>(context) + 1);
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  KvCache cache(m.kv_layout(16), context / 16 + 2 * batch + 4);
  const int root = cache.create();
  std::vector<float> logits(vocab * static_cast<std::size_t>(batch));
  m.forward(cache, root, std::span(prompt).first(static_cast<std::size_t>(context)),
            std::span(positions).first(static_cast<std::size_t>(context)), RowLogits::kLast, std::span(logits).first(vocab));
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(cache.fork(root));
  std::vector<SequenceRows> parts;
  for (int seq : seqs)
    parts.push_back({seq, std::span(&prompt[static_cast<std::size_t>(context)], 1),
                     std::span(&positions[static_cast<std::size_t>(context)], 1), {}, RowLogits::kLast});
  const ForwardContext forward{*m.backend, cache, *m.workspace};
  double batched_s = 0, separate_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    forward.run(parts, logits);
    for (int seq : seqs) cache.truncate(seq, context);
    const auto t1 = std::chrono::steady_clock::now();
    for (std::size_t b = 0; b < parts.size(); ++b) forward.run(parts[b], std::span(logits).subspan(b * vocab, vocab));
    for (int seq : seqs) cache.truncate(seq, context);
    const auto t2 = std::chrono::steady_clock::now();
    const double batched = std::chrono::duration<double>(t1 - t0).count();
    batched_s += batched;
    separate_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(batched);
  }
  state.SetLabel("target-16m, context " + std::to_string(context) + ", " + std::to_string(batch) + " sequences");
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(batch) * state.iterations() / batched_s);
  state.counters["x_separate"] = separate_s / batched_s;
}
BENCHMARK(BM_BatchForward)
    ->ArgsProduct({{128, 512}, {1, 8, 16, 32}})
    ->ArgNames({"context", "batch"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// A 200-token prompt prefilled in one forward (last-row logits).
void BM_Prefill(benchmark::State& state) {
  const auto model = load_bench_model(state, state.range(0));
  BenchModel& m = *model;
  const std::vector<int> prompt = real_prompt(200);
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  KvCache cache(m.kv_layout(16), 16);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));
  for (auto _ : state) {
    const int seq = cache.create();
    m.forward(cache, seq, prompt, positions, RowLogits::kLast, logits);
    cache.free(seq);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(prompt.size()));
}
BENCHMARK(BM_Prefill)->DenseRange(0, kLastModel)->Unit(benchmark::kMillisecond)->UseRealTime();

// target-16m's prefill matrix shapes (n = 200 rows): {out, in} of q/o, k/v, gate/up, down, lm_head.
const int64_t kShapes[][2] = {{384, 384}, {128, 384}, {1024, 384}, {384, 1024}, {4096, 384}};

// Our batch-invariant kernel on a BF16 weight of that shape, for n = 200 rows (prefill), 1
// (decode) and 5 (a verify pass), on each instruction set this CPU runs.
void BM_MatmulOurs(benchmark::State& state) {
  const int64_t out = kShapes[state.range(0)][0], in = kShapes[state.range(0)][1];
  const int n = static_cast<int>(state.range(1));
  const auto isas = cpu::supported_matmul_isas();
  if (static_cast<std::size_t>(state.range(2)) >= isas.size()) return state.SkipWithError("ISA not supported here");
  const cpu::MatmulIsa isa = isas[static_cast<std::size_t>(state.range(2))];
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> w(static_cast<std::size_t>(out * in));
  for (auto& v : w) {
    const float f = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  const TensorView view{"w", DType::BF16, {out, in}, w.data(), "bench"};
  const cpu::PackedWeights packed(view, isa);
  std::vector<float> x(static_cast<std::size_t>(n * in)), y(static_cast<std::size_t>(n * out));
  for (float& v : x) v = normal(rng);
  for (auto _ : state) {
    cpu::matmul(x.data(), packed, y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(cpu::isa_name(isa)) + " " + std::to_string(n) + "x" + std::to_string(in) + " * " +
                 std::to_string(in) + "x" + std::to_string(out) + " bf16");
  state.SetItemsProcessed(state.iterations() * 2 * n * in * out);
}
BENCHMARK(BM_MatmulOurs)
    ->ArgsProduct({benchmark::CreateDenseRange(0, 4, 1), {1, 5, 200}, {0, 1}})
    ->ArgNames({"shape", "rows", "isa"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The kernel streaming weights from memory: a BF16 [36864, 384] matrix (28 MB, target-16m's
// weight bytes, far beyond the L2 cache) against 1..8 rows. weight_GBps = weight bytes read
// per second (one-row decode is bound by it); the rows > 1 show how much compute hides under
// the stream (the verify pass's cost).
void BM_MatmulStream(benchmark::State& state) {
  const int64_t out = 36864, in = 384;
  const int n = static_cast<int>(state.range(0));
  std::vector<uint16_t> w(static_cast<std::size_t>(out * in), 0x3c00);
  const cpu::PackedWeights packed({"w", DType::BF16, {out, in}, w.data(), "bench"}, cpu::matmul_isa());
  std::vector<float> x(static_cast<std::size_t>(n * in), 0.5f), y(static_cast<std::size_t>(n * out));
  for (auto _ : state) {
    cpu::matmul(x.data(), packed, y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GBps"] = benchmark::Counter(static_cast<double>(packed.bytes()) * state.iterations() / 1e9,
                                                     benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulStream)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

// OpenBLAS sgemm on the same shape with f32 weights (its best case: no conversion).
void BM_MatmulOpenBLAS(benchmark::State& state) {
  const int64_t out = kShapes[state.range(0)][0], in = kShapes[state.range(0)][1];
  const int n = 200;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> w(static_cast<std::size_t>(out * in)), x(static_cast<std::size_t>(n * in)),
      y(static_cast<std::size_t>(n * out));
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(out), static_cast<int>(in), 1.0f,
                x.data(), static_cast<int>(in), w.data(), static_cast<int>(in), 0.0f, y.data(), static_cast<int>(out));
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::to_string(n) + "x" + std::to_string(in) + " * " + std::to_string(in) + "x" +
                 std::to_string(out) + " f32");
  state.SetItemsProcessed(state.iterations() * 2 * n * in * out);
}
BENCHMARK(BM_MatmulOpenBLAS)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
