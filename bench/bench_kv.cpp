// Paged KV cache costs on target-16m's layout (8 layers, kv_dim 128, block size 16):
//  - fork (+ free), a speculative append + rollback (truncate), and a tree commit (append 8
//    scratch slots, keep a 3-node path of which 2 entries move) at sequence lengths 128, 1K and
//    8K. None touches the KV contents of the prefix; fork copies and free walks the block table
//    (length / 16 ints, 512 at 8K), the only part that grows with length.
//  - decode tokens/s of target-16m through the paged cache (block size 16) against one block
//    holding the whole sequence (the contiguous layout the paged cache replaced).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "engine/model.h"

namespace specula {
namespace {

const KvLayout kTargetLayout{8, 128, 16};

// A cache holding one sequence of `length` slots, with room for the benchmark's extra slots.
struct Filled {
  PagedKvCache cache;
  int seq;
  explicit Filled(int length) : cache(kTargetLayout, length / kTargetLayout.block_size + 8), seq(cache.create()) {
    cache.append_slots(seq, length);
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

// target-16m decoding after a 512-token prompt (context 512..767, cycling), KV block size
// state.range(0); 0 means one block for the whole sequence.
void BM_DecodeTarget(benchmark::State& state) {
  Model m(std::string(SPECULA_SOURCE_DIR) + "/models/target-16m");
  const int block_size = state.range(0) == 0 ? 1024 : static_cast<int>(state.range(0));
  state.SetLabel(state.range(0) == 0 ? "one block (contiguous)" : "block size " + std::to_string(block_size));
  std::ifstream in(std::string(SPECULA_SOURCE_DIR) + "/tests/data/hf-greedy.json");
  std::vector<int> prompt;
  for (const auto& r : nlohmann::json::parse(in).at("models").at("target-16m"))
    for (int id : r.at("prompt_ids").get<std::vector<int>>()) prompt.push_back(id);
  prompt.resize(512);
  PagedKvCache cache(m.kv_layout(block_size), 1024 / block_size + 2);
  const int seq = cache.create();
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));
  m.forward(cache, seq, {prompt, positions, {}, false}, logits);
  int token = 13;
  for (auto _ : state) {
    if (cache.length(seq) == 768) cache.truncate(seq, 512);
    const int pos = cache.length(seq);
    m.forward(cache, seq, {std::span(&token, 1), std::span(&pos, 1), {}, false}, logits);
    token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeTarget)->Arg(16)->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace specula

BENCHMARK_MAIN();
