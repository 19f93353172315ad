// The soak: 2,000 requests in one process over every decoding loop (plain greedy and
// sampled, speculative with a draft model as chain, static and dynamic tree, n-grams, beam
// search), each of which must free every KV block of its caches, while the process's
// resident memory stays flat after a warm-up. Hidden ([.soak]): run it on its own, best in
// the ASan build with leak detection (`specula_tests "[soak]"`); it prints its figures. Under
// ASan give it a small quarantine (ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=8): freed
// memory waits there (256 MiB by default) before reuse, which grows the resident set by itself.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "runtime/generate.h"
#include "tests/test_support.h"

namespace specula {
namespace {

// Resident set size of this process in MiB (/proc/self/statm).
double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / (1 << 20);
}

}  // namespace

TEST_CASE("soak: 2,000 requests free every KV block and keep memory flat", "[.soak][runtime]") {
  ModelStore models;
  const std::string model = test::model_dir("draft-1m");
  std::vector<GenerateOptions> kinds;
  GenerateOptions base;
  base.model_dir = model;
  base.prompt_ids = {1, 265, 4027, 31, 9};
  base.max_new_tokens = 8;
  base.threads = 1;
  kinds.push_back(base);  // plain greedy
  GenerateOptions o = base;
  o.sampling = SamplingOptions::sample(0.8f, 40, 0.9f);
  o.num_samples = 2;
  kinds.push_back(o);  // plain sampled, two samples
  o = base;
  o.draft.method = DraftMethod::kModel;
  o.draft.model_dir = model;
  o.draft.gamma = 3;
  kinds.push_back(o);  // chain
  o.draft.tree = {2, 2, 1};
  kinds.push_back(o);  // static tree
  o.draft.tree.clear();
  o.draft.tree_budget = 6;
  o.sampling = SamplingOptions::sample();
  kinds.push_back(o);  // dynamic tree, sampled
  o = base;
  o.draft.method = DraftMethod::kNgram;
  kinds.push_back(o);  // n-grams
  o = base;
  o.sampling.strategy = Strategy::kBeam;
  o.sampling.beam_width = 3;
  kinds.push_back(o);  // beam search

  constexpr int kRequests = 2000, kWarmup = 200;
  double warm_mib = 0, peak_mib = 0;
  long tokens = 0;
  for (int r = 0; r < kRequests; ++r) {
    GenerateOptions request = kinds[static_cast<std::size_t>(r) % kinds.size()];
    request.seed = static_cast<uint64_t>(r);
    const nlohmann::json result = generate(models, request);
    const nlohmann::json& stats = result.at("stats");
    REQUIRE(stats.at("kv").at("blocks_in_use_at_end") == 0);
    if (stats.contains("draft") && stats["draft"].contains("kv_blocks_in_use_at_end"))
      REQUIRE(stats["draft"]["kv_blocks_in_use_at_end"] == 0);
    tokens += stats.at("new_tokens").get<long>();
    if (r + 1 == kWarmup) warm_mib = resident_mib();
    if (r + 1 > kWarmup) peak_mib = std::max(peak_mib, resident_mib());
  }
  const double end_mib = resident_mib();
  std::printf("soak: %d requests (%ld tokens), resident %.1f MiB after %d, peak %.1f MiB after, %.1f MiB at the end\n",
              kRequests, tokens, warm_mib, kWarmup, peak_mib, end_mib);
  // Flat: the 1,800 requests after the warm-up add less than 8 MiB (a leak of one 8-token
  // request's outputs, ~1 KiB, would add ~2 MiB; a leaked KV pool, >= 64 KiB, over 100 MiB).
  CHECK(peak_mib - warm_mib < 8.0);
}

}  // namespace specula
