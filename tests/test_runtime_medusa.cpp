// Speculative decoding with Medusa heads on the target's last hidden state end to end:
// greedy output equals plain greedy output (chains and static trees, one request and many at
// once) for random heads and the shipped ones; the heads forwards of a step's drafters run as
// one batched call; sampled output follows the target's exact
// distribution; requests the heads or a scheduler cannot serve are refused by name; the
// shipped heads reproduce their eval.json.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "draft/medusa_drafter.h"
#include "model/medusa_checkpoint_writer.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "tests/test_engine_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"
#include "tests/test_verify_support.h"

namespace specula {
namespace {

using test::reference_prompts;
using test::base_options;
using test::store;

DraftOptions medusa(const std::string& dir, int gamma, std::vector<int> tree = {}) {
  return test::head_draft(DraftMethod::kMedusa, dir, gamma, std::move(tree));
}

// Random Medusa heads for target-16m (3 heads, 1 ResBlock each), written once.
const std::string& random_medusa() {
  static test::TempDir dir;
  static const bool written = [] {
    RandomMedusa o;
    o.num_heads = 3;
    o.num_layers = 1;
    o.seed = 9;
    o.weight_std = 0.05f;
    write_random_medusa(dir.path.string(), store().model(test::model_dir("target-16m")).config(), o);
    return true;
  }();
  (void)written;
  static const std::string path = dir.path.string();
  return path;
}

}  // namespace

TEST_CASE("medusa: greedy speculative output equals plain greedy output", "[runtime][heads]") {
  const std::vector<std::pair<const char*, DraftOptions>> draftings = {
      {"chain 3", medusa(random_medusa(), 3)},
      {"static tree 2,2", medusa(random_medusa(), 4, {2, 2})},
      {"shipped heads, chain 4", medusa(test::model_dir("target-16m-medusa"), 4)},
      {"shipped heads, static tree 3,2,1", medusa(test::model_dir("target-16m-medusa"), 3, {3, 2, 1})}};
  const auto prompts = reference_prompts();
  const std::size_t prompt_step = test::kSanitized ? 6 : 3;
  for (std::size_t i = 0; i < prompts.size(); i += prompt_step) {
    const GenerateOptions plain = base_options(prompts[i], test::kSanitized ? 24 : 40);
    const auto expected = generate(store(), plain)["ids"];
    for (const auto& [name, draft] : draftings) {
      INFO("prompt " << i << ", " << name);
      GenerateOptions spec = plain;
      spec.draft = draft;
      const auto result = generate(store(), spec);
      CHECK(result["ids"] == expected);
      CHECK(result["stats"]["kv"]["blocks_in_use_at_end"] == 0);
      // One forward of the heads a step, and every step drafts, but a last step whose bonus
      // token alone is left (no head runs for a proposal of depth 0).
      const long steps = result["stats"]["steps"].get<long>();
      const long last = result["ids"].size() == static_cast<std::size_t>(plain.max_new_tokens) ? 1 : 0;
      CHECK(result["stats"]["draft"]["draft_forwards"].get<long>() >= steps - last);
      CHECK(result["stats"]["draft"]["draft_forwards"].get<long>() <= steps);
      CHECK(result["stats"]["drafted"].get<long>() >= steps - last);
    }
  }
  // A one-token prompt: the first step's root has no state before it and drafts nothing.
  GenerateOptions one = base_options({prompts[0].front()}, 12);
  const auto expected = generate(store(), one)["ids"];
  one.draft = medusa(random_medusa(), 3);
  CHECK(generate(store(), one)["ids"] == expected);
}

TEST_CASE("medusa: many requests at once give each its own greedy output", "[runtime][heads]") {
  const auto prompts = reference_prompts();
  const int requests = test::kSanitized ? 6 : 12;
  SchedulerLimits limits;
  limits.max_sequences = requests;
  limits.kv_blocks = 64 * requests;
  GenerateOptions shared = base_options(prompts[0], 24);
  Scheduler scheduler(store(), shared, limits);
  std::vector<std::vector<int>> expected;
  for (int r = 0; r < requests; ++r) {
    GenerateOptions o = base_options(prompts[static_cast<std::size_t>(r) % prompts.size()], 16 + r % 5);
    expected.push_back(generate(store(), o)["ids"].get<std::vector<int>>());
    o.draft = r % 2 ? medusa(random_medusa(), 3) : medusa(random_medusa(), 2, {2, 2});
    scheduler.submit(o, static_cast<uint64_t>(r));
  }
  scheduler.run();
  for (int r = 0; r < requests; ++r) {
    INFO("request " << r);
    CHECK(scheduler.outcome(r).samples.front() == expected[static_cast<std::size_t>(r)]);
  }
  CHECK(scheduler.kv_stats().blocks_in_use == 0);
}

TEST_CASE("medusa: drafters sharing heads run one batched heads forward and propose what each proposes alone",
          "[runtime][heads]") {
  // Three greedy chains of 3 from the random heads, each over its own prompt's last state: one
  // heads forward of three rows, and each drafter's chain that of its own forward of one row.
  struct Counting : MedusaBackend {
    const MedusaBackend& inner;
    mutable std::vector<int> rows;  // each forward's rows
    explicit Counting(const MedusaBackend& b) : MedusaBackend(b.medusa()), inner(b) {}
    BackendKind kind() const override { return inner.kind(); }
    std::unique_ptr<Workspace> make_workspace() const override { return inner.make_workspace(); }
    void forward(std::span<const float> states, int n, int heads, Workspace& workspace,
                 std::span<float> logits) const override {
      rows.push_back(n);
      inner.forward(states, n, heads, workspace, logits);
    }
  } heads(store().medusa(random_medusa(), test::model_dir("target-16m")));
  const Backend& target = store().get(test::model_dir("target-16m"));
  const int last = target.config().num_hidden_layers;
  const auto prompts = reference_prompts();
  const auto logit_order = [](std::span<const float> l, std::span<float> p) { std::copy(l.begin(), l.end(), p.begin()); };
  TreeShape chain;
  chain.topology = chain_topology(3);
  const auto propose = [&](std::span<const std::size_t> which) {
    KvCache cache(target.model().kv_layout(16), 64);
    cache.keep_states({last}, target.config().hidden_size);
    const auto workspace = heads.make_workspace();
    std::vector<std::unique_ptr<MedusaDrafter>> drafters;
    std::vector<Drafter*> pointers;
    std::vector<std::vector<int>> committed;
    Philox rng(3);
    for (std::size_t i : which) {
      committed.emplace_back(prompts[i].begin(), prompts[i].begin() + 20);
      const int seq = test::plain_prefill(target, cache, std::span(committed.back()).first(19));
      drafters.push_back(std::make_unique<MedusaDrafter>(heads, *workspace, cache, seq, last, logit_order, false, chain));
      drafters.back()->start(committed.back(), {3}, rng);
      pointers.push_back(drafters.back().get());
    }
    heads.rows.clear();
    std::vector<DraftCall> calls;
    run_draft_forwards(pointers, &calls);
    CHECK(calls.empty());  // a heads forward is not a draft round
    std::vector<std::vector<int>> tokens;
    for (auto& d : drafters) tokens.push_back(d->take_proposal().tree.tokens);
    return tokens;
  };
  const std::size_t all[] = {0, 1, 2};
  const std::vector<std::vector<int>> together = propose(all);
  CHECK(heads.rows == std::vector<int>{3});
  for (std::size_t i : all) {
    const std::vector<std::vector<int>> alone = propose(std::span(&i, 1));
    CHECK(heads.rows == std::vector<int>{1});
    CHECK(alone.front() == together[i]);
    CHECK(together[i].size() == 3);
  }
}

TEST_CASE("medusa: under the threshold and load policies each request gets its own greedy output",
          "[runtime][heads]") {
  const auto draft = [](int r) { return medusa(random_medusa(), 2 + r % 2); };
  CHECK(test::policy_batch_drafted(GammaPolicy::kThreshold, {0, 2}, draft) > 0);
  test::policy_batch_drafted(GammaPolicy::kLoad, {}, draft);
}

TEST_CASE("medusa: speculative sampling's second tokens follow the target's conditional law",
          "[runtime][heads][statistical]") {
  const int samples = test::kSanitized ? 200 : 2000;
  for (const auto& [name, draft] : {std::pair{"chain 3", medusa(random_medusa(), 3)},
                                    std::pair{"tree 2,2", medusa(random_medusa(), 2, {2, 2})}}) {
    INFO(name);
    test::check_second_token_law(draft, SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f), samples, 99);
  }
}

TEST_CASE("medusa: the device's draw plan runs a batch's contexts level by level", "[runtime][heads]") {
  // Tree 0: a sampled chain of 3; tree 1: greedy children, two under the root, two under node 0,
  // one under node 1. Contexts by depth, trees in order within a depth; each context's children
  // consecutive draws in node order.
  const std::vector<double> uniforms{0.1, 0.2, 0.3};
  const std::vector<int> parents{-1, -1, 0, 0, 1};
  std::vector<MedusaTree> trees{{3, DrawOptions{0.8f, 40, 0.9f, 0.02f}, {}, kDrawSampled, uniforms},
                                {5, DrawOptions{1.0f}, parents, kDrawTopK, {}}};
  const MedusaDrawPlan plan = plan_medusa_draws(trees, 3);
  CHECK(plan.context_rows == std::vector<int>{0, 3, 1, 4, 4, 2});  // row r * heads + depth
  CHECK(plan.level_first == std::vector<int>{0, 2, 5, 6});
  CHECK(plan.child_first == std::vector<int>{0, 1, 3, 4, 6, 7, 8});
  CHECK(plan.modes == std::vector<int>{kDrawSampled, kDrawTopK, kDrawSampled, kDrawTopK, kDrawTopK, kDrawSampled});
  CHECK(plan.sources == std::vector<int>{-1, -1, 0, 1, 2, 3});  // the draw of the node each follows
  CHECK(plan.draw_of == std::vector<std::vector<int>>{{0, 3, 7}, {1, 2, 4, 5, 6}});
  CHECK(plan.draw_rows == std::vector<int>{0, 1, 1, 2, 3, 3, 4, 5});
  CHECK(plan.uniforms == std::vector<double>{0.1, 0, 0, 0.2, 0, 0, 0, 0.3});
  CHECK(plan.options[2].top_k == 40);
  CHECK(plan.options[3].temperature == 1.0f);
  CHECK(plan.keep_q);
  trees[0] = {2, DrawOptions{}, {}, kDrawTopK, {}};
  CHECK_FALSE(plan_medusa_draws(trees, 3).keep_q);  // greedy: no distribution is verified against

  using Catch::Contains;
  CHECK_THROWS_WITH(plan_medusa_draws(trees, 1), Contains("tree 0 node 1 lies at depth 2; the heads reach depth 1"));
  const std::vector<int> unordered{-1, 0, -1};
  trees[1] = {3, DrawOptions{1.0f}, unordered, kDrawTopK, {}};
  CHECK_THROWS_WITH(plan_medusa_draws(trees, 3), Contains("tree 1 node 2 has parent -1"));
  trees[1] = {2, DrawOptions{1.0f}, {}, kDrawWithoutReplacement, {}};
  CHECK_THROWS_WITH(plan_medusa_draws(trees, 3), Contains("tree 1 draws by mode 1"));
  const std::vector<double> outside{0.5, 1.0};
  trees[1] = {2, DrawOptions{1.0f}, {}, kDrawSampled, outside};
  CHECK_THROWS_WITH(plan_medusa_draws(trees, 3), Contains("tree 1 node 1: uniform 1"));
  trees[1] = {2, DrawOptions{-1.0f}, {}, kDrawTopK, {}};
  CHECK_THROWS_WITH(plan_medusa_draws(trees, 3), Contains("tree 1: temperature -1"));

  // The CPU backend draws on the host: a drafter with device options never offers its tree.
  const MedusaBackend& heads = store().medusa(random_medusa(), test::model_dir("target-16m"));
  const auto workspace = heads.make_workspace();
  const std::vector<float> state(static_cast<std::size_t>(heads.config().hidden_size), 0.5f);
  CHECK_FALSE(heads.drafts_on_device());
  CHECK_THROWS_WITH(heads.enqueue_draws(state, 1, 2, std::span(trees).first(1), *workspace),
                    Contains("backend 'cpu' draws the Medusa heads' trees on the host"));
}

TEST_CASE("medusa: requests the heads cannot serve are refused by name", "[runtime][heads]") {
  const std::vector<int> prompt = reference_prompts()[0];
  SECTION("a chain longer than the heads") {
    GenerateOptions o = base_options(prompt, 4);
    o.draft = medusa(random_medusa(), 4);
    CHECK_THROWS_WITH(generate(store(), o), Catch::Contains("medusa_num_heads") && Catch::Contains("has 3"));
  }
  SECTION("a tree deeper than the heads") {
    GenerateOptions o = base_options(prompt, 4);
    o.draft = medusa(random_medusa(), 4, {2, 1, 1, 1});
    CHECK_THROWS_WITH(generate(store(), o), Catch::Contains("4 levels deep") && Catch::Contains("has 3"));
  }
  SECTION("a dynamic tree") {
    GenerateOptions o = base_options(prompt, 4);
    o.draft = medusa(random_medusa(), 3);
    o.draft.tree_budget = 8;
    CHECK_THROWS_WITH(generate(store(), o), Catch::Contains("medusa drafts chains and static trees"));
  }
  SECTION("an EAGLE-3 head and Medusa heads in one scheduler") {
    SchedulerLimits limits;
    limits.max_sequences = 2;
    limits.kv_blocks = 128;
    Scheduler scheduler(store(), base_options(prompt, 4), limits);
    GenerateOptions a = base_options(prompt, 4), b = a;
    a.draft = test::head_draft(DraftMethod::kEagle3, test::model_dir("target-16m-eagle3"), 2);
    b.draft = medusa(random_medusa(), 2);
    scheduler.submit(a, 0);
    CHECK_THROWS_WITH(scheduler.submit(b, 1), Catch::Contains("Medusa head " + random_medusa()) &&
                                                  Catch::Contains("EAGLE-3 head " + test::model_dir("target-16m-eagle3")));
  }
}

TEST_CASE("medusa: the shipped heads reproduce their README's agreement per head", "[runtime][heads]") {
  // eval.json: per domain, windows of token ids; agreement_per_step[k] is the share of
  // positions i (i + k + 1 <= last) where head k's argmax at i (teacher-forced: the target's
  // state of t_i) equals the target's argmax after t_{i+k+1}.
  const std::string dir = test::model_dir("target-16m-medusa");
  const nlohmann::json eval = nlohmann::json::parse(std::ifstream(dir + "/eval.json"));
  const Backend& target = store().get(test::model_dir("target-16m"));
  const MedusaBackend& heads = store().medusa(dir, test::model_dir("target-16m"), BackendKind::kCpu);
  const int vocab = target.config().vocab_size, hidden = target.config().hidden_size, k = heads.config().num_heads;
  const auto workspace = heads.make_workspace();
  const auto argmax = [](std::span<const float> row) {
    return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
  };
  for (const auto& [domain, figures] : eval["domains"].items()) {
    INFO(domain);
    std::vector<long> agree(static_cast<std::size_t>(k), 0), positions(static_cast<std::size_t>(k), 0);
    for (const auto& window : eval["eval_window_ids"][domain]) {
      const std::vector<int> ids = window.get<std::vector<int>>();
      const int n = static_cast<int>(ids.size());
      test::Engine t(target, 16, 16);
      t.cache.keep_states({target.config().num_hidden_layers}, hidden);
      const int seq = t.cache.create();
      const std::vector<float> logits = t.prefill(seq, ids);
      std::vector<float> states;
      for (int i = 0; i < n; ++i) {
        const std::span<const float> state = t.cache.states(seq, i);
        states.insert(states.end(), state.begin(), state.end());
      }
      std::vector<float> head_logits(static_cast<std::size_t>(n) * k * vocab);
      heads.forward(states, n, k, *workspace, head_logits);
      for (int h = 0; h < k; ++h)
        for (int i = 0; i + h + 1 < n; ++i) {
          const auto mine = std::span<const float>(head_logits).subspan((static_cast<std::size_t>(i) * k + h) * vocab, vocab);
          const auto theirs = std::span<const float>(logits).subspan(static_cast<std::size_t>(i + h + 1) * vocab, vocab);
          agree[static_cast<std::size_t>(h)] += argmax(mine) == argmax(theirs);
          ++positions[static_cast<std::size_t>(h)];
        }
    }
    for (int h = 0; h < k; ++h) {
      const double agreement = double(agree[static_cast<std::size_t>(h)]) / double(positions[static_cast<std::size_t>(h)]);
      INFO("head " << h << ": agreement " << agreement << " over " << positions[static_cast<std::size_t>(h)]
                   << " positions; eval.json " << figures["agreement_per_step"][h].get<double>());
      CHECK(positions[static_cast<std::size_t>(h)] == figures["positions_per_step"][h].get<long>());
      CHECK(std::abs(agreement - figures["agreement_per_step"][h].get<double>()) <=
            2.0 / double(positions[static_cast<std::size_t>(h)]));
    }
  }
}

}  // namespace specula
