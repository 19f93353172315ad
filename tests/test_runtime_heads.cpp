// Speculative decoding with a draft head on the target's hidden states (EAGLE-3, EAGLE-1) end
// to end: greedy output equals plain greedy output (chains and static trees, one request and
// many at once, dynamic trees too), for a random EAGLE-3 head over a reduced draft vocabulary,
// a random EAGLE-1 head and the shipped EAGLE-3 head, whose proposals the target accepts far
// more often than the same head's fed other layers' states; sampled output follows the
// target's exact distribution; the shipped EAGLE-3 and EAGLE-1 heads reproduce their eval.json.
// On the cuda backend ([gpu]) greedy speculation with the heads (EAGLE-3, EAGLE-1, Medusa)
// emits plain greedy decoding's tokens, the heads' chains and static trees drawn on the device
// and left there for the verification.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "draft/head_drafter.h"
#include "model/head_checkpoint_writer.h"
#include "model/medusa_checkpoint_writer.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "tests/test_engine_support.h"
#include "tests/test_gpu_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"
#include "tests/test_verify_support.h"

namespace specula {
namespace {

using test::reference_prompts;
using test::base_options;
using test::store;

DraftOptions eagle3(const std::string& dir, int gamma, std::vector<int> tree = {}) {
  return test::head_draft(DraftMethod::kEagle3, dir, gamma, std::move(tree));
}

DraftOptions eagle1(const std::string& dir, int gamma, std::vector<int> tree = {}) {
  return test::head_draft(DraftMethod::kEagle, dir, gamma, std::move(tree));
}

// A dynamic tree of `budget` nodes at most `depth` deep.
DraftOptions dynamic(DraftOptions d, int budget) {
  d.tree_budget = budget;
  return d;
}

// A random head for target-16m over 3000 of its 4096 tokens (a d2t map), written once.
const std::string& random_head() {
  static test::TempDir dir;
  static const bool written = [] {
    RandomHead o;
    o.draft_vocab = 3000;
    o.seed = 5;
    o.weight_std = 0.05f;
    write_random_head(dir.path.string(), store().model(test::model_dir("target-16m")).config(), o);
    return true;
  }();
  (void)written;
  static const std::string path = dir.path.string();
  return path;
}

// A random EAGLE-1 head for target-16m, written once.
const std::string& random_eagle1_head() {
  static test::TempDir dir;
  static const bool written = [] {
    RandomHead o;
    o.kind = HeadKind::kEagle1;
    o.seed = 6;
    o.weight_std = 0.05f;
    write_random_head(dir.path.string(), store().model(test::model_dir("target-16m")).config(), o);
    return true;
  }();
  (void)written;
  static const std::string path = dir.path.string();
  return path;
}

// The shipped head read with other tap layers (its weights, a config naming the input of
// target layer 1 three times): the same head fed the wrong states.
const std::string& misfed_head() {
  static test::TempDir dir;
  static const bool written = [] {
    const std::filesystem::path shipped = test::model_dir("target-16m-eagle3");
    nlohmann::json config = nlohmann::json::parse(std::ifstream(shipped / "config.json"));
    config["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {0, 0, 0}}};
    std::ofstream(dir.path / "config.json") << config.dump();
    std::filesystem::create_symlink(shipped / "model.safetensors", dir.path / "model.safetensors");
    return true;
  }();
  (void)written;
  static const std::string path = dir.path.string();
  return path;
}

}  // namespace

TEST_CASE("eagle heads: greedy speculative output equals plain greedy output", "[runtime][heads]") {
  struct Drafting {
    const char* name;
    DraftOptions options;
  };
  const std::string shipped = test::model_dir("target-16m-eagle3");
  const std::vector<Drafting> draftings = {
      {"random head, chain 3", eagle3(random_head(), 3)},
      {"random head, static tree 2,2", eagle3(random_head(), 4, {2, 2})},
      {"shipped head, chain 4", eagle3(shipped, 4)},
      {"shipped head, static tree 3,2,1", eagle3(shipped, 4, {3, 2, 1})},
      {"shipped head, dynamic tree 10", dynamic(eagle3(shipped, 4), 10)},
      {"random head, dynamic tree 6", dynamic(eagle3(random_head(), 3), 6)},
      {"random EAGLE-1 head, chain 3", eagle1(random_eagle1_head(), 3)},
      {"random EAGLE-1 head, dynamic tree 6", dynamic(eagle1(random_eagle1_head(), 3), 6)},
  };
  const auto prompts = reference_prompts();
  const std::size_t prompt_step = test::kSanitized ? 6 : 2;
  long accepted = 0, steps = 0, misfed_accepted = 0, misfed_steps = 0;
  for (std::size_t i = 0; i < prompts.size(); i += prompt_step) {
    const GenerateOptions plain = base_options(prompts[i], test::kSanitized ? 24 : 48);
    const auto expected = generate(store(), plain)["ids"];
    for (const Drafting& drafting : draftings) {
      INFO("prompt " << i << ", " << drafting.name);
      GenerateOptions spec = plain;
      spec.draft = drafting.options;
      const auto result = generate(store(), spec);
      CHECK(result["ids"] == expected);
      CHECK(result["stats"]["kv"]["blocks_in_use_at_end"] == 0);
      if (drafting.options.model_dir == shipped && drafting.options.tree.empty() &&
          drafting.options.tree_budget == 0) {
        accepted += result["stats"]["accepted"].get<long>();
        steps += result["stats"]["steps"].get<long>();
        spec.draft.model_dir = misfed_head();
        const auto misfed = generate(store(), spec);
        CHECK(misfed["ids"] == expected);
        misfed_accepted += misfed["stats"]["accepted"].get<long>();
        misfed_steps += misfed["stats"]["steps"].get<long>();
      }
    }
  }
  // A one-token prompt: the first step's root has no state before it and drafts nothing.
  GenerateOptions one = base_options({prompts[0].front()}, 12);
  const auto expected = generate(store(), one)["ids"];
  one.draft = eagle3(random_head(), 3);
  CHECK(generate(store(), one)["ids"] == expected);
  one.draft = eagle1(random_eagle1_head(), 3);
  CHECK(generate(store(), one)["ids"] == expected);
  // The head reads the states it was trained on: fed those of other layers, the same weights
  // propose what the target takes far less often.
  const double rate = double(accepted) / double(steps), misfed_rate = double(misfed_accepted) / double(misfed_steps);
  INFO("shipped head, chain 4: " << rate << " tokens accepted a step; fed layer 1's input: " << misfed_rate);
  CHECK(rate > 1.2 * misfed_rate);
}

TEST_CASE("draft heads on the cuda backend: greedy speculation emits plain greedy decoding's tokens",
          "[runtime][heads][gpu]") {
  REQUIRE_GPU();
  // Random heads written for the target: on a GPU target-16m, on the host execution, which
  // runs target-16m at seconds a row, draft-1m with short prompts. (The shipped heads do not
  // travel to the GPU machine: scripts/gpu-check.sh's tree leaves them out.)
  const bool host = test::host_execution();
  const std::vector<int> sizes = host ? std::vector<int>{2} : std::vector<int>{1, 8, 32};
  const std::string target = test::model_dir(host ? "draft-1m" : "target-16m");
  const ModelConfig& config = store().model(target).config();
  static test::TempDir eagle3_dir, eagle1_dir, medusa_dir;
  RandomHead e3;
  if (host) e3.tap_ids = {0, 1, config.num_hidden_layers};  // inputs of layers 0 and 1, the last layer's output
  e3.layout = HeadLayout::kSpeculators;
  e3.seed = 21;
  e3.weight_std = 0.05f;
  write_random_head(eagle3_dir.path.string(), config, e3);
  RandomHead e1;
  e1.kind = HeadKind::kEagle1;
  e1.seed = 22;
  e1.weight_std = 0.05f;
  write_random_head(eagle1_dir.path.string(), config, e1);
  RandomMedusa m;
  m.seed = 23;
  m.weight_std = 0.05f;
  write_random_medusa(medusa_dir.path.string(), config, m);
  const std::string eagle3_head = eagle3_dir.path.string(), eagle1_head = eagle1_dir.path.string(),
                    medusa_head = medusa_dir.path.string();
  const auto prompts = reference_prompts();
  const auto request = [&](int r) {
    std::vector<int> prompt = prompts[static_cast<std::size_t>(r) % prompts.size()];
    if (host) prompt.resize(std::min<std::size_t>(prompt.size(), 8));
    GenerateOptions o = base_options(prompt, host ? 8 : 32);
    o.model_dir = target;
    o.backend = BackendKind::kCuda;
    return o;
  };
  std::vector<std::vector<int>> plain;
  for (int r = 0; r < sizes.back(); ++r)
    plain.push_back(generate(store(), request(r))["ids"].get<std::vector<int>>());
  std::vector<std::pair<const char*, DraftOptions>> drafters{
      {"EAGLE-3 head, dynamic tree 6", dynamic(eagle3(eagle3_head, 3), 6)},
      {"Medusa heads, static tree 2,2", test::head_draft(DraftMethod::kMedusa, medusa_head, 2, {2, 2})},
      {"Medusa heads, chain 3", test::head_draft(DraftMethod::kMedusa, medusa_head, 3)}};
  if (!test::kSanitized || !host) {
    drafters.emplace_back("EAGLE-3 head, chain 3", eagle3(eagle3_head, 3));
    drafters.emplace_back("EAGLE-3 head, static tree 2,2", eagle3(eagle3_head, 2, {2, 2}));
    drafters.emplace_back("EAGLE-1 head, chain 2", eagle1(eagle1_head, 2));
  }
  for (const auto& [name, draft] : drafters) {
    for (const int size : sizes) {
      INFO(name << ", batch " << size);
      test::check_device_verified_greedy(request, draft, size, plain);
    }
  }
}

TEST_CASE("eagle heads: many requests at once give each its own greedy output", "[runtime][heads]") {
  const auto prompts = reference_prompts();
  const int requests = test::kSanitized ? 6 : 16;
  std::vector<GenerateOptions> plain;
  std::vector<std::vector<int>> expected;
  for (int r = 0; r < requests; ++r) {
    plain.push_back(base_options(prompts[static_cast<std::size_t>(r) % prompts.size()], 16 + r % 5));
    expected.push_back(generate(store(), plain.back())["ids"].get<std::vector<int>>());
  }
  // A scheduler keeps one set of target states: EAGLE-3 heads (the same taps) share a batch,
  // EAGLE-1 heads (the last layer's output) another.
  const std::vector<std::pair<const char*, std::function<DraftOptions(int)>>> batches = {
      {"EAGLE-3 heads",
       [](int r) {
         return r % 2 ? eagle3(test::model_dir("target-16m-eagle3"), 3) : eagle3(random_head(), 2, {2, 1});
       }},
      {"an EAGLE-1 head",
       [](int r) { return r % 2 ? eagle1(random_eagle1_head(), 3) : eagle1(random_eagle1_head(), 2, {2, 1}); }}};
  for (const auto& [name, draft] : batches) {
    INFO(name);
    SchedulerLimits limits;
    limits.max_sequences = requests;
    limits.kv_blocks = 64 * requests;
    Scheduler scheduler(store(), base_options(prompts[0], 24), limits);
    for (int r = 0; r < requests; ++r) {
      GenerateOptions o = plain[static_cast<std::size_t>(r)];
      o.draft = draft(r);
      scheduler.submit(o, static_cast<uint64_t>(r));
    }
    scheduler.run();
    long head_forwards = 0;
    for (int r = 0; r < requests; ++r) {
      INFO("request " << r);
      const std::vector<int>& got = scheduler.outcome(r).samples.front();
      CHECK(got == expected[static_cast<std::size_t>(r)]);
      head_forwards += scheduler.outcome(r).draft_forwards;
    }
    // The sequences of one head share its forwards: a call per head and round, not per sequence.
    INFO(head_forwards << " drafters' forwards in " << scheduler.stats().draft_calls << " calls");
    CHECK(head_forwards >= 2 * scheduler.stats().draft_calls);
    CHECK(scheduler.kv_stats().blocks_in_use == 0);
  }
}

TEST_CASE("eagle3: under the threshold and load policies each request gets its own greedy output",
          "[runtime][heads]") {
  // Requests of different lengths side by side: the threshold policy's cut-off turns drafting
  // off while more than two share a step and on once fewer do; the cost model drafts where
  // its figures say so. Either way each request's tokens are plain greedy's.
  const auto draft = [](int r) {
    return r % 2 ? eagle3(test::model_dir("target-16m-eagle3"), 3) : eagle3(random_head(), 2);
  };
  CHECK(test::policy_batch_drafted(GammaPolicy::kThreshold, {0.05, 2}, draft) > 0);  // the longest drafted alone
  test::policy_batch_drafted(GammaPolicy::kLoad, {}, draft);
}

TEST_CASE("eagle heads: speculative sampling's second tokens follow the target's conditional law",
          "[runtime][heads][statistical]") {
  const int samples = test::kSanitized ? 200 : 2000;
  for (const auto& [name, draft] : {std::pair{"shipped head, chain 3", eagle3(test::model_dir("target-16m-eagle3"), 3)},
                                    std::pair{"random head, tree 2,2", eagle3(random_head(), 2, {2, 2})},
                                    std::pair{"random EAGLE-1 head, chain 3", eagle1(random_eagle1_head(), 3)}}) {
    INFO(name);
    test::check_second_token_law(draft, SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f), samples, 99);
  }
}

TEST_CASE("eagle heads: the shipped heads reproduce their README's first-step agreement", "[runtime][heads]") {
  // eval.json: per domain, windows of token ids; agreement_per_step[0] is the share of entries
  // j = 1 .. 127 (token t_j, the head's feature of the target's states of t_{j-1}: EAGLE-3 fc
  // of its taps, EAGLE-1 the final-normed last hidden state; teacher-forced) whose argmax is
  // the target's argmax after t_j.
  const Backend& target = store().get(test::model_dir("target-16m"));
  const int vocab = target.config().vocab_size;
  for (const auto& [name, kind] : {std::pair{"target-16m-eagle3", HeadKind::kEagle3},
                                   std::pair{"target-16m-eagle1", HeadKind::kEagle1}}) {
    INFO(name);
    const std::string dir = test::model_dir(name);
    const nlohmann::json eval = nlohmann::json::parse(std::ifstream(dir + "/eval.json"));
    const HeadBackend& head = store().head(dir, test::model_dir("target-16m"), BackendKind::kCpu, kind);
    const HeadConfig& c = head.config();
    const int width = c.num_taps() * target.config().hidden_size;
    for (const auto& [domain, figures] : eval["domains"].items()) {
      INFO(domain);
      long agree = 0, positions = 0;
      for (const auto& window : eval["eval_window_ids"][domain]) {
        const std::vector<int> ids = window.get<std::vector<int>>();
        const int n = static_cast<int>(ids.size());
        test::Engine t(target, 16, 16);
        t.cache.keep_states(c.tap_layers, width);
        const int seq = t.cache.create();
        const std::vector<float> logits = t.prefill(seq, ids);

        KvCache head_cache(head.kv_layout(16), 16);
        const auto workspace = head.make_workspace();
        const HeadForwardContext context{head, target.config(), head_cache, *workspace};
        std::vector<float> head_logits, out;
        const int head_seq = head_cache.create();
        // All entries but the last, logits of every row: feed_head_entries gives the last row's,
        // so the window is fed one entry at a time.
        for (int j = 1; j < n; ++j) {
          feed_head_entries(context, head_seq, t.cache, seq, std::span(ids).first(static_cast<std::size_t>(j + 1)),
                            head_logits, out);
          const int draft =
              static_cast<int>(std::max_element(head_logits.begin(), head_logits.end()) - head_logits.begin());
          const auto row = std::span<const float>(logits).subspan(static_cast<std::size_t>(j) * vocab, vocab);
          const int expected = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
          agree += head.head().draft_to_target()[static_cast<std::size_t>(draft)] == expected;
          ++positions;
        }
      }
      const double agreement = double(agree) / double(positions);
      INFO("agreement " << agreement << " over " << positions << " positions; eval.json "
                        << figures["agreement_per_step"][0].get<double>());
      CHECK(positions == figures["positions_per_step"][0].get<long>());
      CHECK(std::abs(agreement - figures["agreement_per_step"][0].get<double>()) <= 2.0 / double(positions));
    }
  }
}

}  // namespace specula
