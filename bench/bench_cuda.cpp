// The CUDA backend's speed (scripts/gpu-check.sh runs it; figures only from a GPU): GPU 0's
// device-to-device copy bandwidth (the floor: a decode step reads every weight once), decode
// tokens/s at batch 1, 8, 16 and 32 (one decode row per sequence, forks of one prefilled
// prompt, each step a CUDA graph replay), and prefill tokens/s (a 512-token prompt, cuBLASLt).
// Models: SPECULA_CUDA_BENCH_MODELS (comma-separated folders), else the three bundled ones.
// Counters: tokens_per_s, weight_bytes, and floor_tokens_per_s = batch x bandwidth /
// weight_bytes (a step reads every weight once; KV reads not counted), the bandwidth measured
// in the same run; decode is reported as tokens_per_s / floor_tokens_per_s.
// Without a GPU every benchmark skips with the reason.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <numeric>
#include <sstream>

#include "bench/bench_support.h"
#include "engine/cuda/device.h"

namespace specula {
namespace {

std::vector<std::string> bench_models() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SPECULA_CUDA_BENCH_MODELS")) {
    std::stringstream in(env);
    for (std::string d; std::getline(in, d, ',');)
      if (!d.empty()) dirs.push_back(d);
    return dirs;
  }
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) dirs.push_back(std::string(SPECULA_SOURCE_DIR) + "/models/" + name);
  return dirs;
}

// Bandwidth in bytes/s, measured once per process (1 GiB copies, median of 20).
double bandwidth() {
  static const double b = cuda_copy_bandwidth(std::size_t{1} << 30, 20);
  return b;
}

struct GpuModel {
  explicit GpuModel(const std::string& dir)
      : model(std::make_unique<Model>(dir)), backend(make_backend(BackendKind::kCuda, *model, std::nullopt)),
        workspace(backend->make_workspace()) {}
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Workspace> workspace;
};

GpuModel& gpu_model(const std::string& dir) {
  static std::map<std::string, std::unique_ptr<GpuModel>> models;
  auto& m = models[dir];
  if (!m) m = std::make_unique<GpuModel>(dir);
  return *m;
}

void BM_CopyBandwidth(benchmark::State& state) {
  if (cuda_device_count() == 0) return state.SkipWithError(("no GPU: " + cuda_unavailable_reason()).c_str());
  for (auto _ : state) benchmark::DoNotOptimize(bandwidth());
  state.counters["bytes_per_s"] = bandwidth();
  state.SetLabel(cuda_device_name());
}

// Decode: `batch` sequences forked from a prefilled 128-token prompt, one row each per step.
void BM_Decode(benchmark::State& state, const std::string& dir) {
  if (cuda_device_count() == 0) return state.SkipWithError(("no GPU: " + cuda_unavailable_reason()).c_str());
  GpuModel& g = gpu_model(dir);
  const int batch = static_cast<int>(state.range(0));
  const int vocab = g.model->config().vocab_size;
  const int prompt_len = 128, steps_max = 1024;
  KvCache cache(g.backend->kv_layout(16), batch * ((prompt_len + steps_max) / 16 + 2) + 16);
  const ForwardContext ctx{*g.backend, cache, *g.workspace};
  const std::vector<int> prompt = real_prompt(prompt_len);
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  const int base = cache.create();
  std::vector<float> logits(static_cast<std::size_t>(vocab) * batch);
  ctx.run(SequenceRows{base, prompt, positions, {}, RowLogits::kLast}, std::span(logits).first(vocab));
  std::vector<int> seqs;
  for (int i = 0; i < batch; ++i) seqs.push_back(cache.fork(base));
  std::vector<std::vector<int>> tokens(batch, std::vector<int>{13}), pos(batch, std::vector<int>{prompt_len});
  const auto step = [&] {
    std::vector<SequenceRows> parts;
    for (int i = 0; i < batch; ++i) parts.push_back(SequenceRows{seqs[i], tokens[i], pos[i], {}, RowLogits::kAll});
    ctx.run(parts, logits);
    for (auto& p : pos) ++p[0];
    if (pos[0][0] >= prompt_len + steps_max) {  // start over at the prompt: same shapes, bounded pool
      for (int s : seqs) cache.truncate(s, prompt_len);
      for (auto& p : pos) p[0] = prompt_len;
    }
  };
  for (int i = 0; i < 8; ++i) step();  // warm-up: graph capture, module load
  for (auto _ : state) step();
  const double bytes = static_cast<double>(g.backend->weight_bytes());
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()) * batch, benchmark::Counter::kIsRate);
  state.counters["weight_bytes"] = bytes;
  state.counters["floor_tokens_per_s"] = batch * bandwidth() / bytes;  // one weight pass per step
  for (int s : seqs) cache.free(s);
  cache.free(base);
}

// Prefill: a fresh sequence of 512 prompt tokens per iteration (last row's logits).
void BM_Prefill(benchmark::State& state, const std::string& dir) {
  if (cuda_device_count() == 0) return state.SkipWithError(("no GPU: " + cuda_unavailable_reason()).c_str());
  GpuModel& g = gpu_model(dir);
  const int n = 512;
  KvCache cache(g.backend->kv_layout(16), n / 16 + 4);
  const ForwardContext ctx{*g.backend, cache, *g.workspace};
  const std::vector<int> prompt = real_prompt(n);
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(g.model->config().vocab_size));
  const auto once = [&] {
    const int seq = cache.create();
    ctx.run(SequenceRows{seq, prompt, positions, {}, RowLogits::kLast}, logits);
    cache.free(seq);
  };
  once();
  for (auto _ : state) once();
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("BM_CopyBandwidth", BM_CopyBandwidth)->Iterations(1)->UseRealTime();
  for (const std::string& dir : bench_models()) {
    const std::string name = dir.substr(dir.find_last_of('/') + 1);
    benchmark::RegisterBenchmark(("BM_Decode/" + name).c_str(), BM_Decode, dir)
        ->Arg(1)->Arg(8)->Arg(16)->Arg(32)->UseRealTime()->MinTime(0.5)->Repetitions(3)
        ->ReportAggregatesOnly(false);
    benchmark::RegisterBenchmark(("BM_Prefill/" + name).c_str(), BM_Prefill, dir)->UseRealTime()->MinTime(0.5)->Repetitions(3);
  }
  return true;
}();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
