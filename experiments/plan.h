// defines: Plan, what an experiment runs — the distinct runs (the grid points and the
// target-alone baselines their speedups need, deduplicated by their settings) and the
// jobs (run, prompt, seed, repetition), each with a stable key — and RunInfo, the
// description of a run that every results line carries.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/config.h"

namespace specula {

struct RunInfo {
  std::string id;        // 16 hex digits: FNV-1a 64 of the canonical settings (names excluded)
  int index = 0;         // order of first appearance
  std::string role;      // "point" (a grid point) or "baseline" (added for a speedup)
  std::string baseline;  // id of the target-alone run it is compared with; "" if it drafts nothing
  std::string drafter;   // draft.name, else the draft model's folder name, "ngram" or "none"
  std::string shape;     // "none", "chain", "tree", "dynamic" or "adaptive"
  std::string tree;      // draft.tree as "3-2-1", "" when not a static tree
  int gamma = 0;         // draft.gamma (0 without a drafter)
  int nodes = 0;         // draft tokens per round: γ, the static tree's nodes, or the budget
  std::string variant;   // the shape ("γ=4", "tree 3-2-1", "dynamic 16") and swept keys the
                         // other fields do not show ("run.threads=2")
  std::string strategy;  // sampling.name, else derived: "greedy", "T=0.8 top-k=40", "beam w=4"
  std::string label;     // "draft-4m · γ=4 · greedy"
  nlohmann::json coords = nlohmann::json::object();  // {sweep axis: value label}
};

nlohmann::json to_json(const RunInfo& run);
// The RunInfo a results line carries.
RunInfo run_info_from(const nlohmann::json& line);

struct PlannedRun {
  RunInfo info;
  PointConfig config;
  nlohmann::json settings;  // what `info.id` hashes
};

inline constexpr int kAllPrompts = -1;  // Job::prompt of a batched job

// One results line. A run with run.batch_size = 0 has one job per (prompt, seed, repetition);
// a batched run (run.batch_size >= 1) one per (seed, repetition), every prompt in it.
struct Job {
  int run;          // index into Plan::runs
  int prompt;       // index into ExperimentConfig::prompts; kAllPrompts for a batched job
  uint64_t seed;
  int repetition;
  std::string key;  // "<run id>/<prompt id>#<hash of its text>/seed=<seed>/rep=<repetition>", for a batched
                    // job "<run id>/batch#<hash of the prompts' keys>/seed=<seed>/rep=<repetition>"; the run
                    // id hashes the generation settings
};

// The most jobs one plan holds (runs x prompts x seeds x repetitions); make_plan refuses more.
inline constexpr long long kMaxJobs = 1LL << 21;

struct Plan {
  std::vector<PlannedRun> runs;  // a baseline comes before the first point that needs it
  std::vector<Job> jobs;         // prompt-major, then seed, then repetition, so a point and its
                                 // baseline run close in time; run order reversed on odd repetitions;
                                 // the batched jobs last (seed, then repetition)
};

Plan make_plan(const ExperimentConfig& config);

// The request of `run` on one prompt and seed.
GenerateOptions generate_options(const PlannedRun& run, const std::vector<int>& prompt_ids, uint64_t seed);

}  // namespace specula
