// Batch-size table of the scheduler (runtime/scheduler.h) on target-16m: throughput (new
// tokens per second over the whole batch, prefill included) and latency per token (mean gap
// between a request's tokens) at 1, 8, 16 and 32 live sequences, for plain decoding, draft-1m
// chains (gamma 2, fixed and under the load policy, gamma <= 4) and n-grams (gamma 3, fixed
// and load), greedy and T = 1; at batch 1 also fixed draft-1m chains of 1, 3, 4, 5 and n-gram
// proposals of 1, 2, 4 (cases 5-11: the best fixed length the load policy can be held to);
// all of it with the target as stored, in the bf16dot format, in the bf16amx format, and with
// target and draft model in bf16amx (fourth argument 0, 1, 2, 3; bf16amx's cases skip where the
// process cannot run AMX tiles).
// acc_per_step is the mean accepted tokens per speculative sequence step. Each case runs
// max(8, batch) requests of 24 prompt tokens and 48 new tokens, all submitted at once, with
// a new seed each run. Ratios (speedup against plain at the same batch size)
// are taken between cases of the same run; run it alternated and repeated, e.g.
//   OMP_NUM_THREADS=1 build/bench/bench_batch --benchmark_repetitions=3
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <omp.h>

#include <string>

#include "bench/bench_support.h"
#include "runtime/batch_report.h"
#include "runtime/scheduler.h"

namespace specula {
namespace {

struct Method {
  const char* name;
  DraftMethod method;
  int gamma;
  GammaPolicy policy;
};
constexpr Method kMethods[] = {
    {"plain", DraftMethod::kNone, 0, GammaPolicy::kFixed},
    {"draft-1m g2", DraftMethod::kModel, 2, GammaPolicy::kFixed},
    {"draft-1m load g<=4", DraftMethod::kModel, 4, GammaPolicy::kLoad},
    {"ngram g3", DraftMethod::kNgram, 3, GammaPolicy::kFixed},
    {"ngram load g<=3", DraftMethod::kNgram, 3, GammaPolicy::kLoad},
    {"draft-1m g1", DraftMethod::kModel, 1, GammaPolicy::kFixed},
    {"draft-1m g3", DraftMethod::kModel, 3, GammaPolicy::kFixed},
    {"draft-1m g4", DraftMethod::kModel, 4, GammaPolicy::kFixed},
    {"draft-1m g5", DraftMethod::kModel, 5, GammaPolicy::kFixed},
    {"ngram g1", DraftMethod::kNgram, 1, GammaPolicy::kFixed},
    {"ngram g2", DraftMethod::kNgram, 2, GammaPolicy::kFixed},
    {"ngram g4", DraftMethod::kNgram, 4, GammaPolicy::kFixed},
};

constexpr int kTableMethods = 5;  // the table's methods; the others run at batch 1 only

// The matrix formats of the target and of the draft model: as stored, bf16dot
// (matmul_bf16dot.h), bf16amx (matmul_bf16amx.h).
struct Formats {
  std::optional<MatrixFormat> target, draft;
};
const Formats kFormats[] = {
    {std::nullopt, std::nullopt}, {MatrixFormat::kBF16Dot, std::nullopt}, {MatrixFormat::kBF16Amx, std::nullopt},
    {MatrixFormat::kBF16Amx, MatrixFormat::kBF16Amx}};

ModelStore& store() {
  static ModelStore models;
  return models;
}

// args: method index, batch size, sampled (0 greedy, 1 T = 1), target format (kFormats' index)
void BM_BatchGenerate(benchmark::State& state) {
  const Method& m = kMethods[state.range(0)];
  const int batch = static_cast<int>(state.range(1));
  const bool sampled = state.range(2) != 0;
  const Formats format = kFormats[state.range(3)];
  std::string label = std::string(m.name) + (sampled ? " T=1" : " greedy");
  if (format.target) label.append(" ").append(weights_name(format.target));
  if (format.draft) label.append(" draft ").append(weights_name(format.draft));
  state.SetLabel(label);
  if (const std::string why = matrices_unsupported(BackendKind::kCpu, format.target); !why.empty())
    return state.SkipWithError(why.c_str());
  omp_set_num_threads(1);
  const std::vector<int> text = real_prompt(4096);
  const int requests = std::max(8, batch);
  // A seed per run: at T = 1 a repetition samples the random paths, not one path's timing
  // again (over 8 requests of 48 tokens one seed's acceptance is one draw: fixed draft-1m
  // γ = 2 at batch 1 made 1.29x plain with seed 5 and 1.12-1.16x over seeds).
  static uint64_t runs = 0;
  const uint64_t seed = 5 + runs++;
  std::vector<GenerateOptions> options;
  for (int i = 0; i < requests; ++i) {
    GenerateOptions o;
    o.model_dir = std::string(SPECULA_SOURCE_DIR) + "/models/target-16m";
    o.prompt_ids.assign(text.begin() + 97 * i, text.begin() + 97 * i + 24);
    o.max_new_tokens = 48;
    o.threads = 1;
    o.seed = seed;
    o.weights = format.target;
    if (sampled) o.sampling = SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f);
    o.draft.method = m.method;
    if (m.method == DraftMethod::kModel) {
      o.draft.model_dir = std::string(SPECULA_SOURCE_DIR) + "/models/draft-1m";
      o.draft.weights = format.draft;
    }
    if (m.gamma > 0) o.draft.gamma = m.gamma;
    o.gamma_policy = m.policy;
    options.push_back(o);
  }
  // The models are loaded before the clock starts (the target's store entry by the scheduler's
  // constructor, the draft model's here; a request's submission would load it otherwise).
  if (m.method == DraftMethod::kModel) store().get(options.front().draft.model_dir, format.draft);
  SchedulerLimits limits;
  limits.max_sequences = batch;
  for (const GenerateOptions& o : options) limits.kv_blocks += request_kv_blocks(o, 1);
  double accepted = 0, spec_steps = 0;
  double tokens = 0, seconds = 0, gap = 0, rows = 0, occupancy = 0;
  for (auto _ : state) {
    Scheduler scheduler(store(), options.front(), limits);
    std::vector<int> index;
    for (std::size_t i = 0; i < options.size(); ++i) index.push_back(scheduler.submit(options[i], i));
    scheduler.run();
    const nlohmann::json summary = batch_summary(scheduler, index, scheduler.now());
    for (int i : index) accepted += double(scheduler.outcome(i).spec.accepted), spec_steps += double(scheduler.outcome(i).spec.steps);
    tokens += summary["new_tokens"].get<double>();
    seconds += summary["time_s"].get<double>();
    gap += summary["inter_token_s"]["mean"].get<double>();
    rows += summary["rows_per_forward"].get<double>();
    occupancy += summary["mean_occupancy"].get<double>();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["tok_per_s"] = tokens / seconds;
  state.counters["ms_per_token"] = 1e3 * gap / n;
  state.counters["rows_per_fwd"] = rows / n;
  state.counters["occupancy"] = occupancy / n;
  state.counters["acc_per_step"] = spec_steps > 0 ? accepted / spec_steps : 0;
}

void Cases(benchmark::internal::Benchmark* b) {
  for (int format = 0; format < static_cast<int>(std::size(kFormats)); ++format)
    for (int sampled : {0, 1})
      for (int batch : {1, 8, 16, 32})
        for (int m = 0; m < static_cast<int>(std::size(kMethods)); ++m)
          if ((m < kTableMethods || batch == 1) && (kMethods[m].method == DraftMethod::kModel || !kFormats[format].draft))
            b->Args({m, batch, sampled, format});  // a draft format only where there is a draft model
}

BENCHMARK(BM_BatchGenerate)->Apply(Cases)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
