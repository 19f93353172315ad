// Engine throughput on this machine: decode and prefill tokens/s for the three bundled models
// (and $SPECULA_BENCH_MODEL's, if set: e.g. /tmp/tl11-bf16 from `specula make-checkpoint
// --shape tinyllama-1.1b`); the machine's ceilings, a streaming-read probe (512 MiB, read the
// way the kernel reads packed weights) and an FMA peak (independent chains in registers), at 1
// and 2 threads; each model's decode "floor" (its weight bytes streamed once through the read
// probe with the decoding threads, between the decode steps), so that decode time per token
// reads as a share of that floor; the verify-forward cost of n rows against one; one batched
// forward of B sequences against B single-sequence forwards; decode with int8 or bf16dot
// weights against the stored dtype, alternated step by step (BM_DecodeInt8, BM_DecodeBf16Dot);
// the verify-forward cost with bf16dot and bf16amx weights (BM_VerifyForwardBf16Dot,
// BM_VerifyForwardBf16Amx; BM_DecodeBf16Amx: bf16amx against stored, skipped without AMX); the matrix kernel on each
// instruction set with an OpenBLAS sgemm baseline on target-16m's prefill shapes, and on
// TinyLlama-1.1B's shapes at 1-64 rows against sgemm in the same iterations and against the
// FMA peak.
//
// Counters: items_per_second = tokens/s (decode, prefill) or FLOP/s (matmul);
// bytes_per_second = bytes read per second (bandwidth); GFLOPs; floor_us = the probe's time
// for the weight bytes; pct_floor = 100 x floor / decode time; x_one_row = verify time /
// one-row time; pct_peak = % of the FMA peak; x_openblas = sgemm time / ours.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "bench/bench_support.h"
#include "draft/draft_options.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16amx.h"

namespace specula {
namespace {

constexpr std::size_t kProbeBytes = std::size_t(512) << 20;  // >> the 48 MiB L3

// Streams [p, p + bytes) through 64-byte AVX-512 loads as the matrix product reads packed
// weights: one sequential stream, each line requested 8 KiB ahead (the kernel's distance).
__attribute__((target("avx512f"))) uint64_t stream_read_avx512(const unsigned char* p, std::size_t bytes) {
  __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  for (std::size_t i = 0; i + 256 <= bytes; i += 256) {
    for (int j = 0; j < 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192 + 64 * j), _MM_HINT_T0);
      a[j] = _mm512_xor_si512(a[j], _mm512_load_si512(p + i + 64 * j));
    }
  }
  uint64_t lanes[8];
  _mm512_storeu_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a[0], a[1]), _mm512_xor_si512(a[2], a[3])));
  return std::accumulate(lanes, lanes + 8, uint64_t(0));
}

// The same with 32-byte AVX2 loads (a CPU without AVX-512).
uint64_t stream_read_avx2(const unsigned char* p, std::size_t bytes) {
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (std::size_t i = 0; i + 128 <= bytes; i += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192 + 64), _MM_HINT_T0);
    for (int j = 0; j < 4; ++j)
      a[j] = _mm256_xor_si256(a[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32 * j)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a[0], a[1]), _mm256_xor_si256(a[2], a[3]));
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

// One pass over `bytes` of `buffer` by `threads` threads, each streaming its contiguous share (as the
// matrix product splits output blocks).
uint64_t stream_read(const unsigned char* buffer, std::size_t bytes, int threads) {
  const bool wide = cpu::matmul_isa() == cpu::MatmulIsa::avx512;
  uint64_t sum = 0;
  const std::size_t share = bytes / static_cast<std::size_t>(threads) / 256 * 256;
#pragma omp parallel for num_threads(threads) reduction(^ : sum) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const unsigned char* p = buffer + static_cast<std::size_t>(t) * share;
    sum ^= wide ? stream_read_avx512(p, share) : stream_read_avx2(p, share);
  }
  return sum;
}

// kProbeBytes, 64-byte aligned, allocated and touched once for the process.
const unsigned char* probe_buffer() {
  static const unsigned char* buffer = [] {
    auto* b = static_cast<unsigned char*>(std::aligned_alloc(64, kProbeBytes));
    std::memset(b, 1, kProbeBytes);
    return b;
  }();
  return buffer;
}

// Independent FMA chains in registers, `iterations` >= 1 rounds: 24 AVX-512 or 12 AVX2
// accumulators (more than the FMA units' latency x throughput), each acc = acc * m + c with m
// just below 1 (bounded, never denormal). In assembly: the compiler otherwise keeps the
// chains in memory.
__attribute__((target("avx512f"))) void fma_chains_avx512(int64_t iterations) {
  const float m = 0.9999999f, c = 1e-7f, one = 1.0f;
  asm volatile(
      "vbroadcastss %[m], %%zmm30\n\tvbroadcastss %[c], %%zmm31\n\t"
      "vbroadcastss %[one], %%zmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\tvmovaps %%zmm0, %%zmm4\n\t"
      "vmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\tvmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\t"
      "vmovaps %%zmm0, %%zmm9\n\tvmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\tvmovaps %%zmm0, %%zmm12\n\t"
      "vmovaps %%zmm0, %%zmm13\n\tvmovaps %%zmm0, %%zmm14\n\tvmovaps %%zmm0, %%zmm15\n\tvmovaps %%zmm0, %%zmm16\n\t"
      "vmovaps %%zmm0, %%zmm17\n\tvmovaps %%zmm0, %%zmm18\n\tvmovaps %%zmm0, %%zmm19\n\tvmovaps %%zmm0, %%zmm20\n\t"
      "vmovaps %%zmm0, %%zmm21\n\tvmovaps %%zmm0, %%zmm22\n\tvmovaps %%zmm0, %%zmm23\n\t"
      "1:\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm0\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm1\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm2\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm3\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm4\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm5\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm6\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm7\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm8\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm9\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm10\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm11\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm12\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm13\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm14\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm15\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm16\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm17\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm18\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm19\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm20\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm21\n\t"
      "vfmadd213ps %%zmm31, %%zmm30, %%zmm22\n\tvfmadd213ps %%zmm31, %%zmm30, %%zmm23\n\t"
      "dec %[n]\n\tjnz 1b"
      : [n] "+r"(iterations)
      : [m] "m"(m), [c] "m"(c), [one] "m"(one)
      : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9",
        "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16", "zmm17", "zmm18", "zmm19",
        "zmm20", "zmm21", "zmm22", "zmm23", "zmm30", "zmm31", "cc");
}
void fma_chains_avx2(int64_t iterations) {
  const float m = 0.9999999f, c = 1e-7f, one = 1.0f;
  asm volatile(
      "vbroadcastss %[m], %%ymm14\n\tvbroadcastss %[c], %%ymm15\n\t"
      "vbroadcastss %[one], %%ymm0\n\t"
      "vmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\tvmovaps %%ymm0, %%ymm3\n\tvmovaps %%ymm0, %%ymm4\n\t"
      "vmovaps %%ymm0, %%ymm5\n\tvmovaps %%ymm0, %%ymm6\n\tvmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\t"
      "vmovaps %%ymm0, %%ymm9\n\tvmovaps %%ymm0, %%ymm10\n\tvmovaps %%ymm0, %%ymm11\n\t"
      "1:\n\t"
      "vfmadd213ps %%ymm15, %%ymm14, %%ymm0\n\tvfmadd213ps %%ymm15, %%ymm14, %%ymm1\n\t"
      "vfmadd213ps %%ymm15, %%ymm14, %%ymm2\n\tvfmadd213ps %%ymm15, %%ymm14, %%ymm3\n\t"
      "vfmadd213ps %%ymm15, %%ymm14, %%ymm4\n\tvfmadd213ps %%ymm15, %%ymm14, %%ymm5\n\t"
      "vfmadd213ps %%ymm15, %%ymm14, %%ymm6\n\tvfmadd213ps %%ymm15, %%ymm14, %%ymm7\n\t"
      "vfmadd213ps %%ymm15, %%ymm14, %%ymm8\n\tvfmadd213ps %%ymm15, %%ymm14, %%ymm9\n\t"
      "vfmadd213ps %%ymm15, %%ymm14, %%ymm10\n\tvfmadd213ps %%ymm15, %%ymm14, %%ymm11\n\t"
      "dec %[n]\n\tjnz 1b"
      : [n] "+r"(iterations)
      : [m] "m"(m), [c] "m"(c), [one] "m"(one)
      : "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9",
        "ymm10", "ymm11", "ymm14", "ymm15", "cc");
}

// FLOPs of one round of fma_chains on this process's ISA.
double fma_round_flops() { return cpu::matmul_isa() == cpu::MatmulIsa::avx512 ? 2.0 * 24 * 16 : 2.0 * 12 * 8; }

// `threads` threads each running `iterations` rounds of FMA chains.
void fma_chains(int threads, int64_t iterations) {
  const bool wide = cpu::matmul_isa() == cpu::MatmulIsa::avx512;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) wide ? fma_chains_avx512(iterations) : fma_chains_avx2(iterations);
}

// The FMA peak (FLOP/s) with `threads` threads, best of 5 runs of ~10 ms per thread, each
// thread's rate over its own CPU time (so that a shared machine's descheduling does not lower
// the ceiling; on a busy one pct_peak then reads low, never above 100).
double fma_peak_flops(int threads) {
  static std::map<int, double> peaks;
  if (const auto it = peaks.find(threads); it != peaks.end()) return it->second;
  constexpr int64_t kIterations = int64_t(1) << 18;
  const bool wide = cpu::matmul_isa() == cpu::MatmulIsa::avx512;
  const auto cpu_seconds = [] {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double rate = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : rate) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const double t0 = cpu_seconds();
      wide ? fma_chains_avx512(kIterations) : fma_chains_avx2(kIterations);
      rate += kIterations * fma_round_flops() / (cpu_seconds() - t0);
    }
    best = std::max(best, rate);
  }
  return peaks[threads] = best;
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

// Model `index` of bench_models(), its matrices in `weights` (nullopt: as stored), labelled
// with its folder's name.
std::unique_ptr<BenchModel> load_bench_model(benchmark::State& state, int64_t index,
                                             std::optional<MatrixFormat> weights = std::nullopt) {
  const std::string dir = bench_models().at(static_cast<std::size_t>(index));
  state.SetLabel(std::filesystem::path(dir).filename().string());
  return std::make_unique<BenchModel>(dir, weights);
}

// The streaming-read rate with 1 and 2 threads (the decode floor: stream_read).
// bytes_per_second = bytes read per second.
void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const unsigned char* buffer = probe_buffer();
  for (auto _ : state) benchmark::DoNotOptimize(stream_read(buffer, kProbeBytes, threads));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kProbeBytes));
}
BENCHMARK(BM_ReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The FMA peak with 1 and 2 threads: independent FMA chains in registers (fma_chains).
// GFLOPs = FLOPs per wall-clock second / 1e9; peak_GFLOPs = fma_peak_flops (per CPU second),
// the ceiling pct_peak is taken against.
void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr int64_t kIterations = int64_t(1) << 20;
  for (auto _ : state) fma_chains(threads, kIterations);
  state.counters["GFLOPs"] = benchmark::Counter(threads * kIterations * fma_round_flops() * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
  state.counters["peak_GFLOPs"] = fma_peak_flops(threads) / 1e9;
  state.SetLabel(cpu::isa_name(cpu::matmul_isa()));
}
BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One-token decode steps after a 128-token prompt; the context cycles over 128..255 tokens.
// Every iteration also streams the model's weight bytes through the read probe (stream_read,
// same threads), so the floor is measured in the same minutes as the decode. Reported time is
// the decode step; floor_us = the probe's time per pass; pct_floor = 100 x floor / decode time
// (the goal: >= 90).
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
  const std::size_t weight_bytes = m.backend->weight_bytes();
  const int threads = omp_get_max_threads();
  int token = 13;
  double decode_s = 0, floor_s = 0;
  for (auto _ : state) {
    if (cache.length(seq) == 256) cache.truncate(seq, 128);
    const int pos = cache.length(seq);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(cache, seq, std::span(&token, 1), std::span(&pos, 1), RowLogits::kLast, logits);
    token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const auto t1 = std::chrono::steady_clock::now();
    for (std::size_t done = 0; done < weight_bytes; done += kProbeBytes)
      benchmark::DoNotOptimize(stream_read(probe_buffer(), std::min(kProbeBytes, weight_bytes - done), threads));
    const auto t2 = std::chrono::steady_clock::now();
    const double decode = std::chrono::duration<double>(t1 - t0).count();
    decode_s += decode;
    floor_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(decode);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["weight_MB"] = static_cast<double>(weight_bytes) / 1e6;
  state.counters["floor_us"] = floor_s / static_cast<double>(state.iterations()) * 1e6;
  state.counters["pct_floor"] = 100 * floor_s / decode_s;
}
BENCHMARK(BM_Decode)->DenseRange(0, kLastModel)->Unit(benchmark::kMicrosecond)->UseManualTime();

// A weight format against the stored dtype: each iteration runs one step of `rows` tokens (1: a
// decode step; more: a verify-sized causal chunk, every row's logits) with the model as
// stored, then the same step with its matrices in `format` (BM_DecodeInt8: quantised to int8,
// engine/cpu/packed_int8.h; BM_DecodeBf16Dot: bf16dot, engine/cpu/matmul_bf16dot.h), after the
// same 128-token prompt, so both are measured alternately in the same minutes. The reported
// time is both steps'; stored_us and F_us (F: int8, bf16dot) are each one's mean, x_stored =
// stored_us / F_us (the format's speedup); F_pct_floor = 100 x the format's weight bytes' time
// through the read probe (streamed after each iteration, outside the timing, as BM_Decode does)
// / F_us.
void decode_against_stored(benchmark::State& state, MatrixFormat format) {
  const std::string dir = bench_models().at(static_cast<std::size_t>(state.range(0)));
  const int rows = static_cast<int>(state.range(1));
  state.SetLabel(std::filesystem::path(dir).filename().string());
  BenchModel stored(dir), formatted(dir, format);
  struct Stream {
    BenchModel& m;
    KvCache cache;
    int seq;
    std::vector<int> tokens;
    double seconds = 0;
  };
  Stream streams[2] = {{stored, KvCache(stored.kv_layout(16), 32), 0, std::vector<int>(rows, 13)},
                       {formatted, KvCache(formatted.kv_layout(16), 32), 0, std::vector<int>(rows, 13)}};
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
  const std::size_t format_bytes = formatted.backend->weight_bytes();
  const int threads = omp_get_max_threads();
  double floor_s = 0;
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
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t done = 0; done < format_bytes; done += kProbeBytes)
      benchmark::DoNotOptimize(stream_read(probe_buffer(), std::min(kProbeBytes, format_bytes - done), threads));
    floor_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double n = static_cast<double>(state.iterations());
  const double stored_s = streams[0].seconds / n, format_s = streams[1].seconds / n;
  const std::string name = weights_name(format);
  state.counters["stored_us"] = stored_s * 1e6;
  state.counters[name + "_us"] = format_s * 1e6;
  state.counters["x_stored"] = stored_s / format_s;
  state.counters[name + "_weight_MB"] = static_cast<double>(format_bytes) / 1e6;
  state.counters[name + "_pct_floor"] = 100 * floor_s / streams[1].seconds;
}
void BM_DecodeInt8(benchmark::State& state) { decode_against_stored(state, MatrixFormat::kInt8); }
void BM_DecodeBf16Dot(benchmark::State& state) { decode_against_stored(state, MatrixFormat::kBF16Dot); }
// True (and the benchmark skipped, saying why) where this process cannot run AMX tiles.
bool skipped_without_amx(benchmark::State& state) {
  if (cpu::bf16amx_unsupported().empty()) return false;
  state.SkipWithError(cpu::bf16amx_unsupported().c_str());
  return true;
}
void BM_DecodeBf16Amx(benchmark::State& state) {
  if (!skipped_without_amx(state)) decode_against_stored(state, MatrixFormat::kBF16Amx);
}
BENCHMARK(BM_DecodeInt8)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kLastModel, 1), {1, 8}})
    ->ArgNames({"model", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK(BM_DecodeBf16Dot)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kLastModel, 1), {1, 8}})
    ->ArgNames({"model", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK(BM_DecodeBf16Amx)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kLastModel, 1), {1, 8}})
    ->ArgNames({"model", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// The cost model of speculative decoding: a verify forward of `rows` chained tokens (all
// logits) against a one-token decode, both after a `context`-token prompt of target-16m (and
// of $SPECULA_BENCH_MODEL's model),
// interleaved in every iteration so that both see the same machine. Reported time is the
// verify forward; x_one_row = verify time / one-row time (the r(n) of the speedup model).
// BM_VerifyForward: the matrices as stored; BM_VerifyForwardBf16Dot: in bf16dot (both steps).
void verify_forward(benchmark::State& state, std::optional<MatrixFormat> weights) {
  const auto model = load_bench_model(state, state.range(0), weights);
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
  state.SetLabel(std::filesystem::path(m.model->dir()).filename().string() + " (" + weights_name(weights) +
                 "), context " + std::to_string(context) + ", " + std::to_string(rows) + " rows");
  state.counters["x_one_row"] = verify_s / one_row_s;
}
void BM_VerifyForward(benchmark::State& state) { verify_forward(state, std::nullopt); }
void BM_VerifyForwardBf16Dot(benchmark::State& state) { verify_forward(state, MatrixFormat::kBF16Dot); }
void BM_VerifyForwardBf16Amx(benchmark::State& state) {
  if (!skipped_without_amx(state)) verify_forward(state, MatrixFormat::kBF16Amx);
}
const std::vector<std::vector<int64_t>> kVerifyArgs = {
    kLastModel > 2 ? std::vector<int64_t>{0, kLastModel} : std::vector<int64_t>{0}, {128, 512}, {1, 2, 4, 8}};
BENCHMARK(BM_VerifyForward)
    ->ArgsProduct(kVerifyArgs)
    ->ArgNames({"model", "context", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK(BM_VerifyForwardBf16Dot)
    ->ArgsProduct(kVerifyArgs)
    ->ArgNames({"model", "context", "rows"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK(BM_VerifyForwardBf16Amx)
    ->ArgsProduct(kVerifyArgs)
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

// TinyLlama-1.1B's matrix shapes {out, in}: q/o, gate/up, down, lm_head.
const int64_t kShapes11[][2] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};

// Random f32 weights of kShapes11[shape] whose values are exact in BF16 (one shape kept at a
// time: the lm_head's is 262 MB).
const std::vector<float>& shape_weights(int64_t shape) {
  static int64_t held = -1;
  static std::vector<float> w;
  if (held != shape) {
    w.assign(static_cast<std::size_t>(kShapes11[shape][0] * kShapes11[shape][1]), 0.0f);
    std::mt19937 rng(static_cast<unsigned>(shape));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& v : w) {
      uint32_t bits;
      const float f = uniform(rng);
      std::memcpy(&bits, &f, 4);
      bits &= 0xFFFF0000u;
      std::memcpy(&v, &bits, 4);
    }
    held = shape;
  }
  return w;
}

// Our product at 1.1B sizes against OpenBLAS's sgemm (f32 weights) on the same shape, rows and
// threads, the two alternated in every iteration; ours with the weights in BF16 or F32 (the
// exact f32 product) or in the bf16amx format (format 2; skipped where the process cannot run
// AMX tiles). Reported time is ours; GFLOPs ours,
// pct_peak = GFLOPs / the FMA peak at this thread count (fma_peak_flops), x_openblas = sgemm's
// time / ours (above 1: ours is faster), blas_GFLOPs its rate.
void BM_MatmulShapes(benchmark::State& state) {
  const int64_t out = kShapes11[state.range(0)][0], in = kShapes11[state.range(0)][1];
  const int n = static_cast<int>(state.range(1));
  const bool amx = state.range(2) == 2;
  const DType dtype = state.range(2) == 1 ? DType::F32 : DType::BF16;
  if (amx && skipped_without_amx(state)) return;
  const int threads = static_cast<int>(state.range(3));
  const std::vector<float>& w = shape_weights(state.range(0));
  const TensorView view{"w", DType::F32, {out, in}, w.data(), "bench"};
  const cpu::PackedWeights packed = amx ? cpu::PackedWeights(view, cpu::MatmulIsa::avx512, DType::BF16, true,
                                                             cpu::kAmxPairsPerTile)
                                        : cpu::PackedWeights(view, cpu::matmul_isa(), dtype);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(n * in)), y(static_cast<std::size_t>(n * out)), yb(y.size());
  for (float& v : x) v = normal(rng);
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  double ours_s = 0, blas_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (amx)
      cpu::matmul_bf16amx(x.data(), packed, y.data(), n);
    else
      cpu::matmul(x.data(), packed, y.data(), n);
    benchmark::DoNotOptimize(y.data());
    const auto t1 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(out), static_cast<int>(in), 1.0f, x.data(),
                static_cast<int>(in), w.data(), static_cast<int>(in), 0.0f, yb.data(), static_cast<int>(out));
    benchmark::DoNotOptimize(yb.data());
    const auto t2 = std::chrono::steady_clock::now();
    const double ours = std::chrono::duration<double>(t1 - t0).count();
    ours_s += ours;
    blas_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(ours);
  }
  omp_set_num_threads(threads_before);
  const double flops = 2.0 * n * static_cast<double>(in * out) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = flops / ours_s / 1e9;
  state.counters["pct_peak"] = 100 * flops / ours_s / fma_peak_flops(threads);
  state.counters["x_openblas"] = blas_s / ours_s;
  state.counters["blas_GFLOPs"] = flops / blas_s / 1e9;
  state.SetLabel(std::to_string(n) + "x" + std::to_string(in) + " * " + std::to_string(in) + "x" + std::to_string(out) +
                 " " + (amx ? "BF16AMX" : dtype_name(dtype)));
}
BENCHMARK(BM_MatmulShapes)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 4, 8, 16, 32, 64}, {0, 1, 2}, {1, 2}})
    ->ArgNames({"shape", "rows", "format", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
