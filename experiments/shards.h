// defines: Shard, one of N machines running part of an experiment (`specula run CONFIG
// --shard I/N`), the partition of a plan's jobs among shards, and join_shards, which makes one
// results.jsonl of the shards' for `specula report DIR`.
//
// Jobs are partitioned by unit — a (prompt, seed, repetition), or a (seed, repetition) of a
// batched job — so every run of a unit, its baseline included, is timed on the same machine
// and a speedup never divides figures of two machines: unit u (numbered in plan order) goes to
// shard u mod N. Shard I writes a complete experiment directory of its own,
// <output>/shard-I-of-N, resumable like any run; `specula report <output>` joins the N of them
// into <output>/results.jsonl in the plan's job order, so the summary is the one an unsharded
// run of the same results would give.
//
// Usage (a Slurm job array; mpirun: $OMPI_COMM_WORLD_RANK/$OMPI_COMM_WORLD_SIZE):
//   specula run sweep.toml --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
//   specula report results/sweep    # once every shard has finished
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/plan.h"

namespace specula {

struct Shard {
  int index = 0;  // I in [0, count)
  int count = 1;  // N >= 1
};

// "I/N" with 0 <= I < N (N <= 2^20); throws SpeculaError naming --shard and the text otherwise.
Shard parse_shard(std::string_view text);

// "shard-I-of-N": the shard's directory inside the experiment's output directory.
std::string shard_directory(const Shard& shard);

// [plan.jobs.size()]: the shard index of each job.
std::vector<int> job_shards(const Plan& plan, int count);

// The shard directories (shard-I-of-N) `dir` holds, by name; empty when it holds none.
std::vector<std::filesystem::path> shard_directories(const std::filesystem::path& dir);

// Writes dir/results.jsonl, config.toml, config.resolved.toml and experiment.json from the
// shards in `dir`, once every shard of one N is there with every job of its part of the plan
// (otherwise throws SpeculaError naming the shard and what it lacks). A results.jsonl that an
// earlier join did not write is never replaced.
void join_shards(const std::filesystem::path& dir, std::ostream& log);

}  // namespace specula
