// Drafting on the device (Backend::forward_draft, engine/device_draft.h; ForwardContext::
// run_chains; ModelDrafter::device_chain):
// - [gpu] (the host execution of the CUDA sources runs these in CI): a draft model's plain
//   chains drawn whole on the CUDA backend (one call, the tokens fed on the device) are the
//   chains the host drafter draws round by round on the same backend: greedy bitwise, sampled
//   with the same uniforms the same tokens and q within the sampling kernel's bound; chains of
//   several lengths in one call, two proposals each (the second after a commit and catch-up);
// - [gpu] static trees drawn whole on the device (the children kernel) are the trees the host
//   drafter grows level by level: greedy and sampled without replacement, a chain beside
//   them in one call; children a distribution cannot give are dropped, their device rows
//   skipped when the accepted path is committed;
// - [gpu] chains and static trees left on the draft device (ForwardContext::enqueue_chains)
//   and verified there in the target's forward (one synchronisation) give the verdicts, drafted
//   tokens and committed tokens of the same ones read back first, the verification captured as
//   a graph as theirs is; a tree's absent nodes are skipped there as the read-back tree drops
//   them; draws a later draft overwrote are refused;
// - without a GPU: the refusals of malformed rounds and chains (the cache unchanged after a
//   refused call), the CPU backend's refusal, and pack_draft's layout.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>

#include "draft/model_drafter.h"
#include "draft/tree_topology.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/draft_plan.h"
#include "engine/forward.h"
#include "runtime/decoders.h"
#include "runtime/speculative_sequence.h"
#include "sampling/sampler.h"
#include "tests/test_engine_support.h"
#include "tests/test_gpu_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

using Catch::Contains;

// What a drafter needs to propose: its cache sequence, the committed tokens, its random stream.
struct Lane {
  std::unique_ptr<ModelDrafter> drafter;
  std::vector<int> committed;
  Philox rng{0};
};

// Greedy, and sampling through every filter of the chain.
const std::pair<const char*, SamplingOptions> kModes[] = {
    {"greedy", SamplingOptions{}},
    {"T = 0.8, top-k 40, top-p 0.9, min-p 0.02", SamplingOptions::sample(0.8f, 40, 0.9f, 0.02f)}};

// The device's draws under `sampling` (greedy: temperature 0).
DrawOptions draw_options(const SamplingOptions& sampling) {
  if (sampling.strategy != Strategy::kSample) return DrawOptions{};
  return DrawOptions{sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p};
}

TEST_CASE("cuda backend: chains drawn on the device are the host drafter's chains", "[gpu]") {
  REQUIRE_GPU();
  const Model model(test::model_dir("draft-1m"));
  const auto backend = make_backend(BackendKind::kCuda, model, std::nullopt);
  REQUIRE(backend->drafts_on_device());
  const std::size_t vocab = static_cast<std::size_t>(model.config().vocab_size);
  const auto prompts = test::reference_prompts();
  const std::vector<int> lengths{3, 1, 4};  // rounds of three, two, then one chain
  std::vector<std::pair<const char*, SamplingOptions>> modes(std::begin(kModes), std::end(kModes));
  modes.emplace_back("T = 1", SamplingOptions::sample());
  for (const auto& [name, sampling] : modes) {
    INFO(name);
    const bool stochastic = sampling.strategy == Strategy::kSample;
    const DrawOptions device = draw_options(sampling);
    const DistributionFn distribution = draft_distribution(sampling, DraftOptions{});
    test::Engine host_engine(*backend, 16, 128), device_engine(*backend, 16, 128);
    const ForwardContext host_ctx = host_engine.context(), device_ctx = device_engine.context();
    std::vector<Lane> host, on_device;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const TreeShape shape{chain_topology(lengths[i])};
      const std::vector<int> prompt(prompts[i].begin(), prompts[i].begin() + std::min<std::size_t>(prompts[i].size(), 12));
      host.push_back({std::make_unique<ModelDrafter>(host_ctx, host_engine.cache.create(), distribution, stochastic, shape),
                      prompt, Philox(11, i)});
      on_device.push_back({std::make_unique<ModelDrafter>(device_ctx, device_engine.cache.create(), distribution,
                                                          stochastic, shape, RowControls{}, device),
                           prompt, Philox(11, i)});
    }
    for (int step = 0; step < 2; ++step) {
      INFO("proposal " << step);
      std::vector<Drafter*> host_drafters, device_drafters;
      for (std::size_t i = 0; i < lengths.size(); ++i) {
        host[i].drafter->start(host[i].committed, DraftBound{8}, host[i].rng);
        on_device[i].drafter->start(on_device[i].committed, DraftBound{8}, on_device[i].rng);
        CHECK(host[i].drafter->device_chain() == nullptr);
        REQUIRE(on_device[i].drafter->device_chain() != nullptr);
        host_drafters.push_back(host[i].drafter.get());
        device_drafters.push_back(on_device[i].drafter.get());
      }
      run_draft_forwards(host_drafters);
      std::vector<DraftCall> calls;
      run_draft_forwards(device_drafters, &calls);
      REQUIRE(calls.size() == 4);
      CHECK(calls[1].rows == 2);
      CHECK(calls[3].rows == 1);
      for (std::size_t i = 0; i < lengths.size(); ++i) {
        INFO("chain " << i);
        const Proposal h = host[i].drafter->take_proposal(), d = on_device[i].drafter->take_proposal();
        REQUIRE(d.tree.size() == lengths[i]);
        CHECK(d.tree.tokens == h.tree.tokens);
        CHECK(d.tree.parent == h.tree.parent);
        CHECK(d.tree.draw == h.tree.draw);
        REQUIRE(d.q.size() == h.q.size());
        CHECK(d.q.size() == (stochastic ? (d.tree.size() + 1) * vocab : 0));
        // The sampling kernel's contract: within 2^-22 relative of chain_distribution's.
        double worst = 0;
        for (std::size_t k = 0; k < d.q.size(); ++k) {
          const double a = d.q[k], b = h.q[k], scale = std::max(std::fabs(a), std::fabs(b));
          worst = std::max(worst, scale > 0 ? std::fabs(a - b) / scale : 0.0);
        }
        CHECK(worst <= std::ldexp(1.0, -22));
        CHECK(on_device[i].drafter->draft_forwards() == host[i].drafter->draft_forwards());
        Philox host_next = host[i].rng, device_next = on_device[i].rng;
        CHECK(device_next.uniform() == host_next.uniform());  // the same uniforms were drawn
        // The first node accepted, then a bonus token: the next proposal catches up on both.
        const std::vector<int> accepted{0};
        for (Lane* lane : {&host[i], &on_device[i]}) {
          lane->committed.push_back(h.tree.tokens[0]);
          lane->committed.push_back(static_cast<int>(i) + 5);
        }
        host[i].drafter->accept(h.tree, accepted, host[i].committed);
        on_device[i].drafter->accept(d.tree, accepted, on_device[i].committed);
      }
    }
  }
}

// Two rounds over two fresh sequences of `cache`: their prompts, then one tree row each fed
// the first round's draws.
DraftRounds two_rounds(KvCache& cache, const ModelConfig& config) {
  static const std::vector<int> prompt{5, 6, 7}, positions{0, 1, 2}, node{0}, node_position{3}, parents{-1};
  const int a = cache.create(), b = cache.create();
  DraftRounds draft;
  const auto add = [&](std::vector<SequenceRows> parts) {
    RaggedBatch batch = plan_batch(parts, cache.tables(), config);
    draft.plans.push_back(cache.prepare(batch.seqs, batch.rows_per_seq()));
    draft.batches.push_back(std::move(batch));
  };
  add({{a, prompt, positions, {}, RowLogits::kLast}, {b, std::span(prompt).first(2), std::span(positions).first(2), {}, RowLogits::kLast}});
  add({{a, node, node_position, parents, RowLogits::kAll}, {b, node, std::span(positions).subspan(2, 1), parents, RowLogits::kAll}});
  draft.feeds = {-1, -1, -1, -1, -1, 1, 0};
  draft.options = {DrawOptions{}, DrawOptions{0.5f, 3, 0.9f, 0.1f}, DrawOptions{}, DrawOptions{}};
  draft.uniforms = {0, 0.25, 0, 0};
  return draft;
}

// A host drafter's proposal and a device drafter's of the same tree: the same nodes and draw
// modes; q within the sampling kernel's bound at every context with children (the device's
// other rows zero: only the rows children were drawn from come back).
void check_same_tree(const Proposal& h, const Proposal& d, std::size_t vocab) {
  CHECK(d.tree.tokens == h.tree.tokens);
  CHECK(d.tree.parent == h.tree.parent);
  CHECK(d.tree.draw == h.tree.draw);
  REQUIRE(d.q.size() == h.q.size());
  if (d.q.empty()) return;
  std::vector<bool> has_children(static_cast<std::size_t>(d.tree.num_contexts()), false);
  for (const int parent : d.tree.parent) has_children[static_cast<std::size_t>(parent + 1)] = true;
  double worst = 0;
  bool zero_elsewhere = true;
  for (std::size_t c = 0; c < has_children.size(); ++c)
    for (std::size_t k = c * vocab; k < (c + 1) * vocab; ++k) {
      if (!has_children[c]) {
        zero_elsewhere = zero_elsewhere && d.q[k] == 0.0f;
        continue;
      }
      const double a = d.q[k], b = h.q[k], scale = std::max(std::fabs(a), std::fabs(b));
      worst = std::max(worst, scale > 0 ? std::fabs(a - b) / scale : 0.0);
    }
  CHECK(worst <= std::ldexp(1.0, -22));
  CHECK(zero_elsewhere);
}

// Static trees drawn whole on the device (ModelDrafter's device_tree_parents, run_chains with
// tree_parents) against the host drafter growing the same trees level by level on the same
// backend: a branching tree, an irregular one (leaves beside inner nodes on a level) cut to
// depth 2, and a chain in the same call (drawn through the children kernel there); greedy
// (top-k of the draft's softmax) and sampled at T = 1 (without replacement) with the same uniforms;
// two proposals each, the second after a path of two nodes was committed. Then top-k 1
// sampling under a 3, 1, 1 tree: every root child after the first is absent, and so is all
// under it; the proposal is the host's chain, and committing it keeps the device rows of its
// nodes (the next proposal's q is the host's).
TEST_CASE("cuda backend: static trees drawn on the device are the host drafter's trees", "[gpu]") {
  REQUIRE_GPU();
  const Model model(test::model_dir("draft-1m"));
  const auto backend = make_backend(BackendKind::kCuda, model, std::nullopt);
  const std::size_t vocab = static_cast<std::size_t>(model.config().vocab_size);
  const auto prompts = test::reference_prompts();
  const std::vector<int> branching{3, 2};
  const std::vector<TreeShape> shapes{TreeShape{branching_topology(branching)},
                                      TreeShape{TreeTopology{{-1, -1, 0, 0, 1, 2}}}, TreeShape{chain_topology(4)}};
  const std::vector<DraftBound> bounds{DraftBound{8}, DraftBound{2}, DraftBound{8}};
  const std::vector<int> nodes{9, 5, 4};
  const auto make_lanes = [&](test::Engine& engine, const SamplingOptions& sampling, std::span<const TreeShape> lane_shapes,
                              bool device) {
    const bool stochastic = sampling.strategy == Strategy::kSample;
    std::vector<Lane> lanes;
    for (std::size_t i = 0; i < lane_shapes.size(); ++i) {
      const std::vector<int> prompt(prompts[i].begin(), prompts[i].begin() + std::min<std::size_t>(prompts[i].size(), 12));
      lanes.push_back({std::make_unique<ModelDrafter>(engine.context(), engine.cache.create(),
                                                      draft_distribution(sampling, DraftOptions{}), stochastic,
                                                      lane_shapes[i], RowControls{},
                                                      device ? std::optional(draw_options(sampling)) : std::nullopt),
                       prompt, Philox(13, i)});
    }
    return lanes;
  };
  // Sampling without truncation: a child a distribution cannot give (the section below) leaves
  // the host's later contexts other uniforms than the device's.
  const std::pair<const char*, SamplingOptions> modes[] = {kModes[0], {"T = 1", SamplingOptions::sample()}};
  for (const auto& [name, sampling] : modes) {
    INFO(name);
    test::Engine host_engine(*backend, 16, 256), device_engine(*backend, 16, 256);
    std::vector<Lane> host = make_lanes(host_engine, sampling, shapes, false);
    std::vector<Lane> on_device = make_lanes(device_engine, sampling, shapes, true);
    for (int step = 0; step < 2; ++step) {
      INFO("proposal " << step);
      std::vector<Drafter*> host_drafters, device_drafters;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        host[i].drafter->start(host[i].committed, bounds[i], host[i].rng);
        on_device[i].drafter->start(on_device[i].committed, bounds[i], on_device[i].rng);
        REQUIRE(on_device[i].drafter->device_chain() != nullptr);
        CHECK(on_device[i].drafter->device_chain()->is_tree() == (i < 2));
        host_drafters.push_back(host[i].drafter.get());
        device_drafters.push_back(on_device[i].drafter.get());
      }
      run_draft_forwards(host_drafters);
      std::vector<DraftCall> calls;
      run_draft_forwards(device_drafters, &calls);
      REQUIRE(calls.size() == 4);
      CHECK(calls[1].rows == 3 + 2 + 1);
      CHECK(calls[3].rows == 1);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        INFO("tree " << i);
        const Proposal h = host[i].drafter->take_proposal(), d = on_device[i].drafter->take_proposal();
        REQUIRE(d.tree.size() == nodes[i]);
        check_same_tree(h, d, vocab);
        CHECK(on_device[i].drafter->draft_forwards() == host[i].drafter->draft_forwards());
        Philox host_next = host[i].rng, device_next = on_device[i].rng;
        CHECK(device_next.uniform() == host_next.uniform());
        // The first node and its first child accepted, then a bonus token.
        const std::vector<int> accepted{0, d.tree.children(1).front()};
        for (Lane* lane : {&host[i], &on_device[i]}) {
          for (const int node : accepted) lane->committed.push_back(h.tree.tokens[static_cast<std::size_t>(node)]);
          lane->committed.push_back(static_cast<int>(i) + 5);
        }
        host[i].drafter->accept(h.tree, accepted, host[i].committed);
        on_device[i].drafter->accept(d.tree, accepted, on_device[i].committed);
      }
    }
  }
  SECTION("absent children") {
    const SamplingOptions sampling = SamplingOptions::sample(1.0f, 1);
    const std::vector<int> wide{3, 1, 1};
    const std::vector<TreeShape> one{TreeShape{branching_topology(wide)}};
    test::Engine host_engine(*backend, 16, 256), device_engine(*backend, 16, 256);
    std::vector<Lane> host = make_lanes(host_engine, sampling, one, false);
    std::vector<Lane> on_device = make_lanes(device_engine, sampling, one, true);
    for (int step = 0; step < 2; ++step) {
      INFO("proposal " << step);
      for (Lane* lane : {&host[0], &on_device[0]}) {
        lane->drafter->start(lane->committed, DraftBound{8}, lane->rng);
        Drafter* const alone[] = {lane->drafter.get()};
        run_draft_forwards(alone);
      }
      const Proposal h = host[0].drafter->take_proposal(), d = on_device[0].drafter->take_proposal();
      REQUIRE(d.tree.size() == 3);  // top-k 1: one child a level present, the others absent
      check_same_tree(h, d, vocab);
      const std::vector<int> accepted{0, 1, 2};
      for (Lane* lane : {&host[0], &on_device[0]}) {
        for (const int token : h.tree.tokens) lane->committed.push_back(token);
        lane->committed.push_back(7);
      }
      host[0].drafter->accept(h.tree, accepted, host[0].committed);
      on_device[0].drafter->accept(d.tree, accepted, on_device[0].committed);
    }
  }
}

// Sequences of one side of the comparison below: a target and a draft engine, and the
// speculative sequences over them (destroyed first).
struct Side {
  test::Engine target, draft;
  std::vector<std::unique_ptr<SpeculativeSequence>> seqs;
  std::vector<SpeculativeSequence*> pointers() const {
    std::vector<SpeculativeSequence*> out;
    for (const auto& s : seqs) out.push_back(s.get());
    return out;
  }
};

// One step of `seqs` as the scheduler's: drafts (their device chains left on the draft device
// when `leave`), every verify row in one target forward that verifies on the device, commits.
// Returns the verdicts.
std::vector<DeviceVerdict> device_step(Side& side, bool leave, const SamplingOptions& sampling) {
  const std::vector<SpeculativeSequence*> seqs = side.pointers();
  const std::vector<DraftBound> bounds(seqs.size(), DraftBound{8});
  std::vector<DraftCall> calls;
  const DeviceDrafting drafting = run_drafts(seqs, bounds, &calls, leave);
  CHECK(drafting.chains == static_cast<int>(seqs.size()));
  CHECK(drafting.left.size() == (leave ? 1u : 0u));
  std::vector<SequenceRows> parts;
  for (SpeculativeSequence* s : seqs) parts.push_back(s->verify_rows());
  std::vector<DeviceVerify> verify;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    verify.push_back(seqs[i]->device_verify(static_cast<int>(i), sampling));
    CHECK((verify.back().draws != nullptr) == leave);
  }
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * static_cast<std::size_t>(side.target.config().vocab_size));
  std::vector<DeviceVerdict> verdicts(seqs.size());
  side.target.context().run(parts, logits, verify, verdicts);
  for (const DeviceRounds& rounds : drafting.left) {
    const std::vector<double> seconds = rounds.draws->round_seconds();
    CHECK(rounds.first_call + seconds.size() == calls.size());
    CHECK(std::all_of(seconds.begin(), seconds.end(), [](double x) { return x >= 0; }));
  }
  SpeculativeStats stats;
  for (std::size_t i = 0; i < seqs.size(); ++i) seqs[i]->commit_verdict(verdicts[i], stats);
  return verdicts;
}

TEST_CASE("cuda backend: chains and trees left on the draft device verify as those read back first", "[gpu]") {
  REQUIRE_GPU();
  const Model target_model(test::model_dir("target-16m")), draft_model(test::model_dir("draft-1m"));
  const auto target = make_backend(BackendKind::kCuda, target_model, std::nullopt);
  const auto draft = make_backend(BackendKind::kCuda, draft_model, std::nullopt);
  const auto prompts = test::reference_prompts();
  const std::vector<int> branching{2, 2};
  // Chains in every mode; static trees where no child is absent (greedy, T = 1: the two sides
  // then draw the same uniforms) and under top-k 1, where all but one child of each context is
  // absent (left on the device, the whole tree is verified without them; read back, the tree
  // of the others) and every verdict is deterministic.
  struct Mode {
    const char* name;
    SamplingOptions sampling;
    bool trees;
  };
  const Mode modes[] = {{kModes[0].first, kModes[0].second, true},
                        {kModes[1].first, kModes[1].second, false},
                        {"T = 1", SamplingOptions::sample(), true},
                        {"top-k 1", SamplingOptions::sample(1.0f, 1), true}};
  // Sanitized: top-k 1 alone (it gathers q rows and verifies around absent nodes).
  for (const Mode& mode : test::kSanitized ? std::span(modes).last(1) : std::span(modes)) {
    const SamplingOptions& sampling = mode.sampling;
    INFO(mode.name);
    const bool stochastic = sampling.strategy == Strategy::kSample, absent = sampling.top_k == 1;
    const DrawOptions device = draw_options(sampling);
    const DistributionFn distribution = draft_distribution(sampling, DraftOptions{});
    const auto sampler = make_sampler(sampling);
    std::vector<TreeShape> shapes{TreeShape{chain_topology(3)}, TreeShape{chain_topology(1)}, TreeShape{chain_topology(4)}};
    if (mode.trees) {
      shapes.push_back(TreeShape{branching_topology(branching)});
      shapes.push_back(TreeShape{TreeTopology{{-1, -1, 0, 0, 1, 2}}});
    }
    Side read_back{test::Engine(*target, 16, 128), test::Engine(*draft, 16, 128), {}};
    Side left{test::Engine(*target, 16, 128), test::Engine(*draft, 16, 128), {}};
    for (Side* side : {&read_back, &left})
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const std::vector<int>& p = prompts[i % prompts.size()];
        const std::vector<int> prompt(p.begin(), p.begin() + std::min<std::size_t>(p.size(), 12));
        const std::span<const int> body = std::span(prompt).first(prompt.size() - 1);
        const int target_seq = side->target.cache.create(), draft_seq = side->draft.cache.create();
        side->target.prefill(target_seq, body);
        side->draft.prefill(draft_seq, body);
        auto drafter = std::make_unique<ModelDrafter>(side->draft.context(), draft_seq, distribution, stochastic,
                                                      shapes[i], RowControls{}, device);
        side->seqs.push_back(std::make_unique<SpeculativeSequence>(side->target.context(), target_seq, std::move(drafter),
                                                                   *sampler, prompt, Philox(13, i), VerifyRule::kToken));
      }
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const std::size_t before = cuda::cuda_live_graphs();
      const std::vector<DeviceVerdict> expected = device_step(read_back, false, sampling);
      const std::size_t between = cuda::cuda_live_graphs();
      const std::vector<DeviceVerdict> got = device_step(left, true, sampling);
      // Gathering draws leaves the graphs as they are without: the verification's captured at
      // the second step of its shape (the same shape on both sides unless nodes are absent).
      if (!absent) CHECK(cuda::cuda_live_graphs() - between == between - before);
      if (step == 1 && !absent) CHECK(between > before);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        INFO("sequence " << i);
        CHECK(expected[i].drafted.empty());
        CHECK(got[i].drafted.size() == static_cast<std::size_t>(shapes[i].topology.size()));
        const auto present = std::count_if(got[i].drafted.begin(), got[i].drafted.end(), [](int t) { return t >= 0; });
        CHECK(present == (absent ? shapes[i].topology.depth() : shapes[i].topology.size()));  // top-k 1: a child a level
        if (!absent) CHECK(got[i].accepted_nodes == expected[i].accepted_nodes);
        CHECK(got[i].accepted_nodes.size() == expected[i].accepted_nodes.size());
        CHECK(got[i].tokens == expected[i].tokens);
        CHECK(left.seqs[i]->committed() == read_back.seqs[i]->committed());
      }
    }
    // Draws a later draft on their workspace overwrote are refused, not read.
    const std::vector<SpeculativeSequence*> seqs = left.pointers();
    const std::vector<DraftBound> bounds(seqs.size(), DraftBound{8});
    const DeviceDrafting drafting = run_drafts(seqs, bounds, nullptr, true);
    REQUIRE(drafting.left.size() == 1);
    std::vector<SequenceRows> parts;
    for (SpeculativeSequence* s : seqs) parts.push_back(s->verify_rows());
    std::vector<DeviceVerify> verify;
    for (std::size_t i = 0; i < seqs.size(); ++i) verify.push_back(seqs[i]->device_verify(static_cast<int>(i), sampling));
    const int other = left.draft.cache.create();
    const std::vector<int> prompt{5, 6, 7}, positions{0, 1, 2};
    const std::vector<double> uniforms(2, 0.5);
    const DeviceChain chain{{other, prompt, positions, {}, RowLogits::kLast}, 2, device,
                            stochastic ? std::span<const double>(uniforms) : std::span<const double>(), {}, kDrawTopK};
    left.draft.context().enqueue_chains(std::span(&chain, 1));
    std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * static_cast<std::size_t>(target->config().vocab_size));
    std::vector<DeviceVerdict> verdicts(seqs.size());
    CHECK_THROWS_WITH(left.target.context().run(parts, logits, verify, verdicts), Contains("overwritten"));
    CHECK_THROWS_WITH(drafting.left.front().draws->round_seconds(), Contains("overwritten"));
  }
}

TEST_CASE("device draft: malformed rounds and chains are refused naming the field", "[engine]") {
  const Model model(test::model_dir("draft-1m"));
  const ModelConfig& config = model.config();
  const int vocab = config.vocab_size;
  KvCache cache(model.kv_layout(16), 64);
  const DraftRounds good = two_rounds(cache, config);
  CHECK(good.rows() == 7);
  CHECK(good.draws() == 4);
  CHECK_NOTHROW(check_draft_rounds(good, vocab));
  const auto refused = [&](DraftRounds d, const std::string& what) {
    CHECK_THROWS_WITH(check_draft_rounds(d, vocab), Contains("device draft") && Contains(what));
  };
  DraftRounds d = good;
  d.feeds[5] = 2;  // a draw of its own round
  refused(d, "round 1 row 0 is fed draw 2");
  d = good;
  d.feeds[0] = 0;
  refused(d, "round 0 row 0 is fed draw 0");
  d = good;
  d.feeds.pop_back();
  refused(d, "6 feeds for 7 rows");
  d = good;
  d.plans.pop_back();
  refused(d, "1 plans for 2 rounds");
  d = good;
  d.options[1].top_p = 0;
  refused(d, "logit row 1: top_p 0");
  d = good;
  d.options[1].temperature = -1;
  refused(d, "logit row 1: temperature -1");
  d = good;
  d.options.pop_back();
  refused(d, "3 options for 4 logit rows");
  d = good;
  d.uniforms[1] = 1;
  refused(d, "draw 1: uniform 1");
  d = good;
  d.uniforms.pop_back();
  refused(d, "3 uniforms for 4 draws");
  // Children: round 0's logit rows draw 2 and 0, round 1's 1 each: 4 draws, the second round
  // fed draws 1 and 0.
  DraftRounds with_children = good;
  with_children.children = {2, 0, 1, 1};
  with_children.child_modes = {kDrawWithoutReplacement, kDrawTopK, kDrawSampled, kDrawTopK};
  CHECK(with_children.draws() == 4);
  CHECK_NOTHROW(check_draft_rounds(with_children, vocab));
  d = with_children;
  d.children[1] = -1;
  refused(d, "logit row 1 has -1 children");
  d = with_children;
  d.child_modes[2] = 3;
  refused(d, "logit row 2 has child mode 3");
  d = with_children;
  d.child_modes.pop_back();
  refused(d, "3 child modes for 4 children counts");
  d = with_children;
  d.children.pop_back();
  d.child_modes.pop_back();
  refused(d, "3 children counts for 4 logit rows");
  d = with_children;
  d.children = {1, 0, 2, 1};  // round 0 draws one: draw 1 is round 1's
  refused(d, "round 1 row 0 is fed draw 1");

  // The CPU backend draws on the host: it refuses forward_draft by name, and run_chains leaves
  // every sequence as it was.
  const auto cpu = make_backend(BackendKind::kCpu, model, std::nullopt);
  CHECK_FALSE(cpu->drafts_on_device());
  const auto workspace = cpu->make_workspace();
  std::vector<int> tokens(4);
  CHECK_THROWS_WITH(cpu->forward_draft(good, cache.storage(), *workspace, tokens, {}),
                    Contains("backend 'cpu'") && Contains("not implemented"));
  KvCache fresh(cpu->kv_layout(16), 64);
  const ForwardContext ctx{*cpu, fresh, *workspace};
  const int seq = fresh.create();
  const std::vector<int> prompt{5, 6, 7}, positions{0, 1, 2};
  std::vector<double> uniforms{0.5, 0.5};
  const DeviceChain chain{{seq, prompt, positions, {}, RowLogits::kLast}, 2, DrawOptions{1, 0, 1, 0}, uniforms, {}, kDrawTopK};
  std::vector<int> out(2);
  std::vector<float> q(2 * static_cast<std::size_t>(vocab));
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{chain}, out, q), Contains("not implemented"));
  CHECK(fresh.length(seq) == 0);
  DeviceChain bad = chain;
  bad.length = 0;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out, q), Contains("chain 0 has length 0"));
  bad = chain;
  bad.uniforms = std::span(uniforms).first(1);
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out, q), Contains("chain 0 has 1 uniforms; need 2"));
  bad = chain;
  bad.first.logits = RowLogits::kAll;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out, q), Contains("last row's logits"));
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{chain}, std::span(out).first(1), q), Contains("tokens holds 1"));
  const std::vector<int> fork{-1, -1}, backwards{-1, 0, -1};
  bad = chain;
  bad.tree_parents = fork;
  bad.tree_mode = 4;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out, q), Contains("tree 0 has mode 4"));
  bad.tree_parents = std::span(fork).first(1);
  bad.tree_mode = kDrawWithoutReplacement;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out, q), Contains("tree 0 has 1 parents for 2 nodes"));
  bad.length = 3;
  bad.tree_parents = backwards;
  std::vector<double> three{0.5, 0.5, 0.5};
  std::vector<int> out3(3);
  bad.uniforms = three;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out3, {}),
                    Contains("tree 0 node 2 has parent -1; nodes must follow their parents"));
  bad = chain;
  bad.tree_parents = fork;
  bad.tree_mode = kDrawTopK;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{bad}, out, {}), Contains("chain 0 has 2 uniforms; need 0"));
  CHECK(fresh.length(seq) == 0);
  // A drafter given device options on a backend that draws on the host grows on the host.
  ModelDrafter drafter(ctx, fresh.create(), draft_distribution(SamplingOptions{}, DraftOptions{}), false,
                       TreeShape{chain_topology(3)}, RowControls{}, DrawOptions{});
  Philox rng(1);
  drafter.start(prompt, DraftBound{3}, rng);
  CHECK(drafter.device_chain() == nullptr);
  CHECK(drafter.pending_forward() != nullptr);
  CHECK_THROWS_WITH(ModelDrafter(ctx, fresh.create(), draft_distribution(SamplingOptions{}, DraftOptions{}), true,
                                 TreeShape{chain_topology(3)}, RowControls{}, DrawOptions{}),
                    Contains("device draws greedy for a sampled drafter"));
}

TEST_CASE("device draft: pack_draft lays out every round's step, the feeds, the draws and their children", "[engine]") {
  const Model model(test::model_dir("draft-1m"));
  const int vocab = model.config().vocab_size;
  KvCache cache(model.kv_layout(16), 64);
  DraftRounds draft = two_rounds(cache, model.config());
  const cuda::CudaOptions options;
  const cuda::DraftUpload up = cuda::pack_draft(draft, vocab, 0, options, 1);
  REQUIRE(up.steps.size() == 2);
  CHECK(up.first_row == std::vector<int>{0, 5, 7});
  CHECK(up.first_draw == std::vector<int>{0, 2, 4});
  CHECK(up.probs_rows == 2);  // one round's draws at a time
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(up.step_at[r] % cuda::kAlign == 0);
    CHECK(std::memcmp(up.data.data() + up.step_at[r], up.steps[r].data.data(), up.steps[r].data.size() * 4) == 0);
  }
  const auto ints = [&](std::size_t at, int n) {
    std::vector<int> v(static_cast<std::size_t>(n));
    std::memcpy(v.data(), up.data.data() + at, v.size() * sizeof(int));
    return v;
  };
  CHECK(ints(up.at.feeds, 7) == draft.feeds);
  CHECK(ints(up.at.top_k, 4) == std::vector<int>{0, 3, 0, 0});
  double u = 0;
  std::memcpy(&u, up.data.data() + up.at.uniforms + sizeof(double), sizeof(double));
  CHECK(u == 0.25);
  CHECK(up.at.tokens >= up.upload_bytes);
  CHECK(up.device_bytes == up.at.probs + 2 * static_cast<std::size_t>(vocab) * sizeof(float));
  CHECK(up.probs_row(1, false) == 0);
  draft.keep_q = true;
  const cuda::DraftUpload kept = cuda::pack_draft(draft, vocab, 0, options, 1);
  CHECK(kept.probs_rows == 4);
  CHECK(kept.probs_row(1, true) == 2);
  CHECK(kept.device_bytes == kept.at.probs + 4 * static_cast<std::size_t>(vocab) * sizeof(float));
  CHECK_FALSE(kept.children);

  // Children: the logit rows draw 2, 0, 1 and 1 (5 draws); round 1's rows were fed draws 1 and 0.
  draft.children = {2, 0, 1, 2};
  draft.child_modes = {kDrawWithoutReplacement, kDrawTopK, kDrawSampled, kDrawTopK};
  draft.uniforms = {0.1, 0.2, 0.3, 0.4, 0.5};
  const cuda::DraftUpload tree = cuda::pack_draft(draft, vocab, 0, options, 1);
  CHECK(tree.children);
  CHECK(tree.first_logit == std::vector<int>{0, 2, 4});
  CHECK(tree.first_draw == std::vector<int>{0, 2, 5});
  const auto tree_ints = [&](std::size_t at, int n) {
    std::vector<int> v(static_cast<std::size_t>(n));
    std::memcpy(v.data(), tree.data.data() + at, v.size() * sizeof(int));
    return v;
  };
  CHECK(tree_ints(tree.at.feeds, 7) == draft.feeds);
  CHECK(tree_ints(tree.at.child_first, 5) == std::vector<int>{0, 2, 2, 3, 5});
  CHECK(tree_ints(tree.at.child_modes, 4) == draft.child_modes);
  CHECK(tree_ints(tree.at.sources, 4) == std::vector<int>{-1, -1, 1, 0});
  std::memcpy(&u, tree.data.data() + tree.at.uniforms + 4 * sizeof(double), sizeof(double));
  CHECK(u == 0.5);
  CHECK(tree.at.tokens >= tree.upload_bytes);
  CHECK(tree.at.probs >= tree.at.tokens + 5 * sizeof(int));
  CHECK(tree.device_bytes == tree.at.probs + 4 * static_cast<std::size_t>(vocab) * sizeof(float));
}

}  // namespace
}  // namespace specula
