// Drafting on the device (Backend::forward_draft, engine/device_draft.h; ForwardContext::
// run_chains; ModelDrafter::device_chain):
// - [gpu] (the host execution of the CUDA sources runs these in CI): a draft model's plain
//   chains drawn whole on the CUDA backend (one call, the tokens fed on the device) are the
//   chains the host drafter draws round by round on the same backend: greedy bitwise, sampled
//   with the same uniforms the same tokens and q within the sampling kernel's bound; chains of
//   several lengths in one call, two proposals each (the second after a commit and catch-up);
// - [gpu] static trees drawn whole on the device (the children kernel) are the trees the host
//   drafter grows level by level: greedy and sampled without replacement, a chain beside
//   them in one call, without and under logit controls; children a distribution cannot give are dropped, their device rows
//   skipped when the accepted path is committed;
// - [gpu] chains, static trees and dynamic trees left on the draft device
//   (ForwardContext::enqueue_chains) and verified there in the target's forward (one
//   synchronisation; a dynamic tree's rows and parents written there) give the verdicts, drafted
//   tokens and committed tokens of the same ones read back first, the verification captured as
//   a graph as theirs is; a tree's absent nodes are skipped there as the read-back tree drops
//   them; draws a later draft overwrote are refused;
// - [gpu] Medusa heads' chains and static trees drawn on their device and left there
//   (MedusaBackend::enqueue_draws) give the verdicts, drafted and committed tokens of the same
//   drafters growing them on the host from the rows read back; draws a later enqueue overwrote
//   are refused;
// - [gpu] dynamic trees grown whole on the device (the dynamic-tree kernel) are the trees the
//   host drafter grows best-first, where every batch finds its nodes; one call per shape;
// - [gpu] draft rounds replayed as graphs draw the tokens and q of rounds enqueued kernel by
//   kernel, bitwise, also after the draft buffer grew under captured graphs;
// - without a GPU: the refusals of malformed rounds and chains (the cache unchanged after a
//   refused call), the CPU backend's refusal, and pack_draft's layout.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <span>
#include <tuple>

#include "draft/head_drafter.h"
#include "draft/medusa_drafter.h"
#include "draft/model_drafter.h"
#include "draft/tree_topology.h"
#include "engine/backend.h"
#include "engine/chain_rounds.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/draft_plan.h"
#include "engine/forward.h"
#include "model/head_checkpoint_writer.h"
#include "model/medusa_checkpoint_writer.h"
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

// Logit controls that move a small draft model's drafts: each path token penalised, a bias, a
// ban, and EOS masked through the first three generated tokens.
LogitControls moving_controls() {
  LogitControls c;
  c.repetition_penalty = 3.0f;
  c.frequency_penalty = 1.5f;
  c.presence_penalty = 0.5f;
  c.logit_bias = {{7, 2.0f}};
  c.banned_tokens = {9};
  c.min_new_tokens = 3;
  return c;
}

// One lane per shape on `engine`, lane i's prompt the first 12 tokens of reference prompt i:
// a draft model's drafter of draft_distribution(sampling) under `controls` (nullptr: none),
// drawing on the device when `device`, its random stream Philox(seed, i).
std::vector<Lane> make_lanes(test::Engine& engine, const SamplingOptions& sampling, std::span<const TreeShape> shapes,
                             bool device, std::uint64_t seed, const LogitControls* controls = nullptr) {
  static const auto prompts = test::reference_prompts();
  const bool stochastic = sampling.strategy == Strategy::kSample;
  std::vector<Lane> lanes;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::vector<int> prompt(prompts[i].begin(), prompts[i].begin() + std::min<std::size_t>(prompts[i].size(), 12));
    lanes.push_back({std::make_unique<ModelDrafter>(engine.context(), engine.cache.create(),
                                                    draft_distribution(sampling, DraftOptions{}), stochastic, shapes[i],
                                                    RowControls{controls, prompt.size(), engine.context().backend.config().eos_token_ids},
                                                    device ? std::optional(draw_options(sampling)) : std::nullopt),
                     prompt, Philox(seed, i)});
  }
  return lanes;
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

// Two rounds over two fresh sequences of `cache`: their prompts (`first` tokens, then two),
// then one tree row each fed the first round's draws.
DraftRounds two_rounds(KvCache& cache, const ModelConfig& config, int first = 3) {
  static const std::vector<int> node{0}, parents{-1};
  const std::size_t n = static_cast<std::size_t>(first);
  std::vector<int> prompt(n), positions(n + 1);
  std::iota(prompt.begin(), prompt.end(), 5);
  std::iota(positions.begin(), positions.end(), 0);
  const int a = cache.create(), b = cache.create();
  DraftRounds draft;
  const auto add = [&](std::vector<SequenceRows> parts) {
    RaggedBatch batch = plan_batch(parts, cache.tables(), config);
    draft.plans.push_back(cache.prepare(batch.seqs, batch.rows_per_seq()));
    draft.batches.push_back(std::move(batch));
  };
  add({{a, std::span(prompt).first(n), std::span(positions).first(n), {}, RowLogits::kLast},
       {b, std::span(prompt).first(2), std::span(positions).first(2), {}, RowLogits::kLast}});
  add({{a, node, std::span(positions).subspan(n, 1), parents, RowLogits::kAll},
       {b, node, std::span(positions).subspan(2, 1), parents, RowLogits::kAll}});
  draft.feeds.assign(n + 2, -1);
  draft.feeds.insert(draft.feeds.end(), {1, 0});
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
  CHECK(d.siblings == h.siblings);
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

// Static trees drawn whole on the device (TreeGrowth::device_shape, run_chains with
// tree_parents) against the host drafter growing the same trees level by level on the same
// backend: a branching tree, an irregular one (leaves beside inner nodes on a level) cut to
// depth 2, a chain and a chain of 2 with 2 siblings (the device's root draws 3 children, the
// proposal the chain first) in the same call (drawn through the children kernel there); greedy
// (top-k of the draft's softmax) and sampled at T = 1 (without replacement) with the same uniforms;
// each also under logit controls (every row edited on the device over the path drawn there,
// EOS masked in the first rows only); two proposals each, the second after a path of two nodes
// was committed (the siblings' chain's second token unfed: its device row, never written,
// must not be kept). Then top-k 1
// sampling under a 3, 1, 1 tree: every root child after the first is absent, and so is all
// under it; the proposal is the host's chain, and committing it keeps the device rows of its
// nodes (the next proposal's q is the host's).
TEST_CASE("cuda backend: static trees drawn on the device are the host drafter's trees", "[gpu]") {
  REQUIRE_GPU();
  const Model model(test::model_dir("draft-1m"));
  const auto backend = make_backend(BackendKind::kCuda, model, std::nullopt);
  const std::size_t vocab = static_cast<std::size_t>(model.config().vocab_size);
  const std::vector<int> branching{3, 2};
  const std::vector<TreeShape> shapes{TreeShape{branching_topology(branching)},
                                      TreeShape{TreeTopology{{-1, -1, 0, 0, 1, 2}}}, TreeShape{chain_topology(4)},
                                      TreeShape{chain_topology(2)}};
  const std::vector<DraftBound> bounds{DraftBound{8}, DraftBound{2}, DraftBound{8}, DraftBound{8, 0, 2}};
  const std::vector<int> nodes{9, 5, 4, 4};
  // Sampling without truncation: a child a distribution cannot give (the section below) leaves
  // the host's later contexts other uniforms than the device's. Each also under controls, the
  // device editing every row over the path it drew.
  const LogitControls controls = moving_controls();
  const std::tuple<const char*, SamplingOptions, const LogitControls*> modes[] = {
      {"greedy", SamplingOptions{}, nullptr},
      {"T = 1", SamplingOptions::sample(), nullptr},
      {"greedy under controls", SamplingOptions{}, &controls},
      {"T = 1 under controls", SamplingOptions::sample(), &controls}};
  for (const auto& [name, sampling, under] : modes) {
    INFO(name);
    test::Engine host_engine(*backend, 16, 256), device_engine(*backend, 16, 256);
    std::vector<Lane> host = make_lanes(host_engine, sampling, shapes, false, 13, under);
    std::vector<Lane> on_device = make_lanes(device_engine, sampling, shapes, true, 13, under);
    for (int step = 0; step < 2; ++step) {
      INFO("proposal " << step);
      std::vector<Drafter*> host_drafters, device_drafters;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        host[i].drafter->start(host[i].committed, bounds[i], host[i].rng);
        on_device[i].drafter->start(on_device[i].committed, bounds[i], on_device[i].rng);
        REQUIRE(on_device[i].drafter->device_chain() != nullptr);
        CHECK(on_device[i].drafter->device_chain()->is_tree() == (i != 2));
        host_drafters.push_back(host[i].drafter.get());
        device_drafters.push_back(on_device[i].drafter.get());
      }
      run_draft_forwards(host_drafters);
      std::vector<DraftCall> calls;
      run_draft_forwards(device_drafters, &calls);
      REQUIRE(calls.size() == 4);
      CHECK(calls[1].rows == 3 + 2 + 1 + 3);
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
    std::vector<Lane> host = make_lanes(host_engine, sampling, one, false, 13);
    std::vector<Lane> on_device = make_lanes(device_engine, sampling, one, true, 13);
    for (int step = 0; step < 2; ++step) {
      INFO("proposal " << step);
      const Proposal h = propose(*host[0].drafter, host[0].committed, DraftBound{8}, host[0].rng);
      const Proposal d = propose(*on_device[0].drafter, on_device[0].committed, DraftBound{8}, on_device[0].rng);
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

// Dynamic trees grown whole on the device (TreeGrowth::device_shape, the dynamic-tree kernel)
// against the host drafter growing the same trees best-first on the same backend: 16 nodes 4 a
// batch (4 children a context) beside 10 nodes 3 a batch (3 children, a last batch of one) and
// 3 nodes 8 a batch (the root's round alone), with a chain in the same run_draft_forwards (one
// call per shape); greedy (the top-k of the draft's softmax) and sampled at T = 1 (the top-k of
// that distribution); two proposals each, the second after a path of two nodes
// was committed (its device rows kept). Then top-k 1 sampling: a context gives one child, so a
// batch takes one node and the rest of it is absent; the device's tree is the first of the
// host's nodes, one a round (the host goes on feeding to max_depth), and its commit keeps the
// right rows.
// A bound shallower than the batches leaves the tree to the host.
TEST_CASE("cuda backend: dynamic trees grown on the device are the host drafter's trees", "[gpu]") {
  REQUIRE_GPU();
  const Model model(test::model_dir("draft-1m"));
  const auto backend = make_backend(BackendKind::kCuda, model, std::nullopt);
  const std::size_t vocab = static_cast<std::size_t>(model.config().vocab_size);
  const auto dynamic = [](int budget, int top_k, int width) { return TreeShape{TreeTopology{}, budget, top_k, width}; };
  const auto commit = [](Lane& lane, const Proposal& p, std::span<const int> accepted, int bonus) {
    for (const int node : accepted) lane.committed.push_back(p.tree.tokens[static_cast<std::size_t>(node)]);
    lane.committed.push_back(bonus);
    lane.drafter->accept(p.tree, accepted, lane.committed);
  };
  const std::vector<TreeShape> shapes{dynamic(16, 4, 4), dynamic(10, 3, 3), dynamic(3, 4, 8), TreeShape{chain_topology(3)}};
  const std::vector<int> rounds{4, 4, 1, 3};
  // Sampling without truncation: every context has its top_k children (below, one has fewer).
  const std::pair<const char*, SamplingOptions> modes[] = {kModes[0], {"T = 1", SamplingOptions::sample()}};
  for (const auto& [name, sampling] : modes) {
    SECTION(name) {
      test::Engine host_engine(*backend, 16, 256), device_engine(*backend, 16, 256);
      std::vector<Lane> host = make_lanes(host_engine, sampling, shapes, false, 19);
      std::vector<Lane> on_device = make_lanes(device_engine, sampling, shapes, true, 19);
      for (int step = 0; step < 2; ++step) {
        INFO("proposal " << step);
        std::vector<Drafter*> host_drafters, device_drafters;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          host[i].drafter->start(host[i].committed, DraftBound{8}, host[i].rng);
          on_device[i].drafter->start(on_device[i].committed, DraftBound{8}, on_device[i].rng);
          REQUIRE(on_device[i].drafter->device_chain() != nullptr);
          CHECK(on_device[i].drafter->device_chain()->is_dynamic() == (i < 3));
          host_drafters.push_back(host[i].drafter.get());
          device_drafters.push_back(on_device[i].drafter.get());
        }
        run_draft_forwards(host_drafters);
        std::vector<DraftCall> calls;
        run_draft_forwards(device_drafters, &calls);
        CHECK(calls.size() == 4 + 4 + 1 + 3);  // one call per shape, a call's rounds each
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          INFO("lane " << i);
          const Proposal h = host[i].drafter->take_proposal(), d = on_device[i].drafter->take_proposal();
          check_same_tree(h, d, vocab);
          CHECK(d.tree.size() == (i < 3 ? shapes[i].dynamic_budget : 3));
          CHECK(on_device[i].drafter->draft_forwards() == host[i].drafter->draft_forwards());
          CHECK(on_device[i].drafter->draft_forwards() == (step + 1) * rounds[i]);
          std::vector<int> accepted{0};
          const std::vector<int> below = d.tree.children(1);
          if (!below.empty()) accepted.push_back(below.front());
          commit(host[i], h, accepted, static_cast<int>(i) + 5);
          commit(on_device[i], d, accepted, static_cast<int>(i) + 5);
        }
      }
    }
  }
  SECTION("a context of one child") {
    const SamplingOptions sampling = SamplingOptions::sample(1.0f, 1);
    const std::vector<TreeShape> one{dynamic(12, 4, 4)};
    test::Engine host_engine(*backend, 16, 256), device_engine(*backend, 16, 256);
    std::vector<Lane> host = make_lanes(host_engine, sampling, one, false, 19);
    std::vector<Lane> on_device = make_lanes(device_engine, sampling, one, true, 19);
    for (int step = 0; step < 2; ++step) {
      INFO("proposal " << step);
      const Proposal h = propose(*host[0].drafter, host[0].committed, DraftBound{8}, host[0].rng);
      const Proposal d = propose(*on_device[0].drafter, on_device[0].committed, DraftBound{8}, on_device[0].rng);
      REQUIRE(h.tree.size() == 8);   // the host's chain of one child a context, max_depth deep
      REQUIRE(d.tree.size() == 3);   // the device's: one node a round
      CHECK(std::equal(d.tree.tokens.begin(), d.tree.tokens.end(), h.tree.tokens.begin()));
      CHECK(std::equal(d.tree.parent.begin(), d.tree.parent.end(), h.tree.parent.begin()));
      const std::vector<int> accepted{0, 1, 2};
      for (Lane* lane : {&host[0], &on_device[0]}) commit(*lane, d, accepted, 7);
    }
  }
  SECTION("a bound shallower than the batches") {
    const std::vector<TreeShape> one{dynamic(16, 4, 4)};
    test::Engine engine(*backend, 16, 256);
    std::vector<Lane> lanes = make_lanes(engine, SamplingOptions{}, one, true, 19);
    lanes[0].drafter->start(lanes[0].committed, DraftBound{3}, lanes[0].rng);
    CHECK(lanes[0].drafter->device_chain() == nullptr);
    lanes[0].drafter->start(lanes[0].committed, DraftBound{4}, lanes[0].rng);
    CHECK(lanes[0].drafter->device_chain() != nullptr);
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
std::vector<DeviceVerdict> device_step(Side& side, bool leave, const SamplingOptions& sampling,
                                       std::span<const DraftBound> bounds) {
  const std::vector<SpeculativeSequence*> seqs = side.pointers();
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
  // Chains in every mode; static trees and a chain with two siblings (a tree on the device, the
  // chain first in the proposal) where no child is absent (greedy, T = 1: the two sides
  // then draw the same uniforms) and under top-k 1, where all but one child of each context is
  // absent (left on the device, the whole tree is verified without them; read back, the tree
  // of the others) and every verdict is deterministic. Dynamic trees (their rows and parents
  // written on the target's device) at T = 1, where every batch finds its nodes (greedy ones:
  // the scheduler's greedy speculation on the device, tests/test_cuda_device_verify.cpp).
  // Chains and trees under logit controls that raise the path's tokens, at T = 1 (greedy ones:
  // the scheduler's, as above): left on the device, every row is edited there over the drawn
  // paths (draft and target); read back, the target's rows by the host's edits of the known
  // paths.
  enum class Kind { kChains, kChainsAndTrees, kDynamic };
  struct Mode {
    const char* name;
    SamplingOptions sampling;
    Kind kind;
    const LogitControls* controls = nullptr;
  };
  LogitControls repeating = moving_controls();  // path tokens raised: their edits decide verdicts
  repeating.repetition_penalty = 0.5f;
  repeating.frequency_penalty = -1.5f;
  repeating.presence_penalty = -0.5f;
  const Mode modes[] = {{kModes[0].first, kModes[0].second, Kind::kChainsAndTrees},
                        {kModes[1].first, kModes[1].second, Kind::kChains},
                        {"T = 1", SamplingOptions::sample(), Kind::kChainsAndTrees},
                        {"T = 1 under controls", SamplingOptions::sample(), Kind::kChainsAndTrees, &repeating},
                        {"T = 1, dynamic trees", SamplingOptions::sample(), Kind::kDynamic},
                        {"top-k 1", SamplingOptions::sample(1.0f, 1), Kind::kChainsAndTrees}};
  // Sanitized: T = 1's dynamic trees and top-k 1 (it gathers q rows and verifies around absent
  // nodes).
  for (const Mode& mode : test::kSanitized ? std::span(modes).last(2) : std::span(modes)) {
    const SamplingOptions& sampling = mode.sampling;
    INFO(mode.name);
    const bool stochastic = sampling.strategy == Strategy::kSample, absent = sampling.top_k == 1;
    const DrawOptions device = draw_options(sampling);
    const DistributionFn distribution = draft_distribution(sampling, DraftOptions{});
    const auto sampler = make_sampler(sampling);
    std::vector<TreeShape> shapes{TreeShape{chain_topology(3)}, TreeShape{chain_topology(1)}, TreeShape{chain_topology(4)}};
    std::vector<DraftBound> bounds(shapes.size(), DraftBound{8});
    if (mode.kind == Kind::kChainsAndTrees) {
      shapes.push_back(TreeShape{branching_topology(branching)});
      shapes.push_back(TreeShape{TreeTopology{{-1, -1, 0, 0, 1, 2}}});
      shapes.push_back(TreeShape{chain_topology(2)});  // with 2 siblings: a tree on the device
      bounds.insert(bounds.end(), {DraftBound{8}, DraftBound{8}, DraftBound{8, 0, 2}});
    }
    if (mode.kind == Kind::kDynamic) shapes.assign(3, TreeShape{TreeTopology{}, 12, 4, 4});
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
        const RowControls row_controls{mode.controls, prompt.size(), target->config().eos_token_ids};
        auto drafter = std::make_unique<ModelDrafter>(side->draft.context(), draft_seq, distribution, stochastic,
                                                      shapes[i], row_controls, device);
        side->seqs.push_back(std::make_unique<SpeculativeSequence>(side->target.context(), target_seq, std::move(drafter),
                                                                   *sampler, prompt, Philox(13, i), VerifyRule::kToken,
                                                                   row_controls));
      }
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const std::size_t before = cuda::cuda_live_graphs();
      const std::vector<DeviceVerdict> expected = device_step(read_back, false, sampling, bounds);
      const std::size_t between = cuda::cuda_live_graphs();
      const std::vector<DeviceVerdict> got = device_step(left, true, sampling, bounds);
      // Gathering draws leaves the graphs as they are without: the verification's captured at
      // the second step of its shape (the same shape on both sides unless nodes are absent).
      if (!absent) CHECK(cuda::cuda_live_graphs() - between == between - before);
      if (step == 1 && !absent) CHECK(between > before);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        INFO("sequence " << i);
        const int nodes = mode.kind == Kind::kDynamic ? shapes[i].dynamic_budget
                                                      : shapes[i].topology.size() + bounds[i].siblings;
        CHECK(expected[i].drafted.empty());
        CHECK(got[i].drafted.size() == static_cast<std::size_t>(nodes));
        const auto present = std::count_if(got[i].drafted.begin(), got[i].drafted.end(), [](int t) { return t >= 0; });
        CHECK(present == (absent ? shapes[i].topology.depth() : nodes));  // top-k 1: a child a level
        // A dynamic tree's parents come back: the root's top_k children first, then the others.
        CHECK(got[i].parents.size() == (mode.kind == Kind::kDynamic ? static_cast<std::size_t>(nodes) : 0));
        if (mode.kind == Kind::kDynamic) {
          CHECK(std::count(got[i].parents.begin(), got[i].parents.end(), -1) == 4);
          CHECK(std::all_of(got[i].parents.begin() + 4, got[i].parents.end(), [](int p) { return p >= 0; }));
        }
        if (!absent) CHECK(got[i].accepted_nodes == expected[i].accepted_nodes);
        CHECK(got[i].accepted_nodes.size() == expected[i].accepted_nodes.size());
        CHECK(got[i].tokens == expected[i].tokens);
        CHECK(left.seqs[i]->committed() == read_back.seqs[i]->committed());
      }
    }
    // Draws a later draft on their workspace overwrote are refused, not read.
    const std::vector<SpeculativeSequence*> seqs = left.pointers();
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

// One side of the Medusa comparison below: a target engine keeping the last layer's states, the
// heads' workspace, and the speculative sequences over them (destroyed first).
struct MedusaSide {
  test::Engine target;
  std::unique_ptr<Workspace> heads;
  std::vector<std::unique_ptr<SpeculativeSequence>> seqs;
};

// One step of `seqs` (over `target`) as the scheduler's: drafts (the heads' proposals left on
// their device when `leave`, else grown on the host), every verify row in one target forward
// that verifies on the device, commits. Left proposals come as one enqueue, its rounds draft
// calls (`in_calls`: an EAGLE head's) or not (Medusa's one). Returns the verdicts, each with the
// drafted tokens: of a proposal left on the device, the draws that came back; of one grown on
// the host, its tokens.
std::vector<DeviceVerdict> heads_step(test::Engine& target, std::span<const std::unique_ptr<SpeculativeSequence>> owned,
                                      std::span<const DraftBound> bounds, bool leave, const SamplingOptions& sampling,
                                      bool in_calls) {
  std::vector<SpeculativeSequence*> seqs;
  for (const auto& s : owned) seqs.push_back(s.get());
  std::vector<DraftCall> calls;
  const DeviceDrafting drafting = run_drafts(seqs, bounds, &calls, leave);
  CHECK(drafting.chains == (leave ? static_cast<int>(seqs.size()) : 0));
  CHECK(drafting.left.size() == (leave ? 1u : 0u));
  CHECK(std::all_of(drafting.left.begin(), drafting.left.end(), [&](const DeviceRounds& r) { return r.in_calls == in_calls; }));
  std::vector<SequenceRows> parts;
  std::vector<DeviceVerify> verify;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    parts.push_back(seqs[i]->verify_rows());
    verify.push_back(seqs[i]->device_verify(static_cast<int>(i), sampling));
    CHECK((verify.back().draws != nullptr) == leave);
  }
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) *
                            static_cast<std::size_t>(target.config().vocab_size));
  std::vector<DeviceVerdict> verdicts(seqs.size());
  target.context().run(parts, logits, verify, verdicts);
  for (const DeviceRounds& rounds : drafting.left) {
    const std::vector<double> seconds = rounds.draws->round_seconds();
    CHECK(seconds.size() == (in_calls ? calls.size() - rounds.first_call : 1u));
    CHECK(std::all_of(seconds.begin(), seconds.end(), [](double t) { return t >= 0; }));
  }
  SpeculativeStats stats;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->commit_verdict(verdicts[i], stats);
    CHECK(verdicts[i].drafted.empty() == !leave);
    if (!leave) verdicts[i].drafted.assign(parts[i].tokens.begin() + 1, parts[i].tokens.end());
  }
  return verdicts;
}

// Checks the verdicts of proposals left on a device (`got`) against those of the same drafters
// growing them on the host (`expected`): the same drafted tokens less the absent ones (`absent`,
// top-k 1: all but one child of each context, so a node a level), accepted nodes (their count
// where nodes are absent, the indices then differing), emitted and committed tokens.
void check_left_as_grown(std::span<const DeviceVerdict> got, std::span<const DeviceVerdict> expected,
                         std::span<const TreeShape> shapes, std::span<const DraftBound> bounds, bool absent,
                         std::span<const std::unique_ptr<SpeculativeSequence>> left,
                         std::span<const std::unique_ptr<SpeculativeSequence>> grown) {
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    INFO("sequence " << i);
    const int nodes =
        shapes[i].dynamic_budget > 0 ? shapes[i].dynamic_budget : shapes[i].topology.size() + bounds[i].siblings;
    CHECK(got[i].drafted.size() == static_cast<std::size_t>(nodes));
    std::vector<int> present;  // the host's tree lacks the absent nodes
    std::copy_if(got[i].drafted.begin(), got[i].drafted.end(), std::back_inserter(present), [](int t) { return t >= 0; });
    CHECK(present == expected[i].drafted);
    CHECK(present.size() == static_cast<std::size_t>(absent ? shapes[i].topology.depth() : nodes));
    if (!absent) CHECK(got[i].accepted_nodes == expected[i].accepted_nodes);
    CHECK(got[i].accepted_nodes.size() == expected[i].accepted_nodes.size());
    CHECK(got[i].tokens == expected[i].tokens);
    CHECK(left[i]->committed() == grown[i]->committed());
  }
}

// Steps of `left` (proposals left on the drafting device) against `host` (the same drafters
// growing them on the host) as check_left_as_grown compares them, two (sanitized: one); then a
// later enqueue on the left side's drafting workspace (`overwrite`) between the next drafts and
// their verification: the draws it overwrote are refused.
void compare_left_with_grown(test::Engine& host_target, std::span<const std::unique_ptr<SpeculativeSequence>> host,
                             test::Engine& left_target, std::span<const std::unique_ptr<SpeculativeSequence>> left,
                             std::span<const TreeShape> shapes, std::span<const DraftBound> bounds,
                             const SamplingOptions& sampling, bool in_calls, const std::function<void()>& overwrite) {
  for (int step = 0; step < (test::kSanitized ? 1 : 2); ++step) {
    INFO("step " << step);
    const std::vector<DeviceVerdict> expected = heads_step(host_target, host, bounds, false, sampling, in_calls);
    const std::vector<DeviceVerdict> got = heads_step(left_target, left, bounds, true, sampling, in_calls);
    check_left_as_grown(got, expected, shapes, bounds, sampling.top_k == 1, left, host);
  }
  std::vector<SpeculativeSequence*> seqs;
  for (const auto& s : left) seqs.push_back(s.get());
  run_drafts(seqs, bounds, nullptr, true);
  std::vector<SequenceRows> parts;
  std::vector<DeviceVerify> verify;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    parts.push_back(seqs[i]->verify_rows());
    verify.push_back(seqs[i]->device_verify(static_cast<int>(i), sampling));
  }
  overwrite();
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) *
                            static_cast<std::size_t>(left_target.config().vocab_size));
  std::vector<DeviceVerdict> verdicts(seqs.size());
  CHECK_THROWS_WITH(left_target.context().run(parts, logits, verify, verdicts), Contains("overwritten"));
}

// The modes of the heads' comparisons: greedy, T = 1 (the same uniforms on both sides, no child
// absent), and top-k 1, where all but one child of each context is absent.
const std::pair<const char*, SamplingOptions> kHeadModes[] = {
    kModes[0], {"T = 1", SamplingOptions::sample()}, {"top-k 1", SamplingOptions::sample(1.0f, 1)}};

// The shapes of the heads' comparisons: chains of 3 and 2, trees 2x2 and {-1, -1, 0, 0, 1, 2}.
std::vector<TreeShape> head_shapes() {
  const std::vector<int> branching{2, 2};
  return {TreeShape{chain_topology(3)}, TreeShape{chain_topology(2)}, TreeShape{branching_topology(branching)},
          TreeShape{TreeTopology{{-1, -1, 0, 0, 1, 2}}}};
}

// Medusa heads' chains and static trees drawn on their device and left there
// (MedusaBackend::enqueue_draws) give the verdicts, drafted and committed tokens of the same
// drafters growing them on the host from the heads' rows read back, over two steps: random
// heads (three, one ResBlock) on draft-1m; greedy and T = 1 (the same uniforms on both sides, no
// child absent), and top-k 1, where all but one child of each context is absent and skipped
// (sanitized: the two sampled modes, one step). Draws a later enqueue on the heads' workspace
// overwrote are refused.
TEST_CASE("cuda backend: Medusa trees left on the heads' device verify as those grown on the host", "[gpu]") {
  REQUIRE_GPU();
  const std::string target_dir = test::model_dir("draft-1m");
  const Model target_model(target_dir);
  const auto target = make_backend(BackendKind::kCuda, target_model, std::nullopt);
  static test::TempDir dir;
  RandomMedusa random;
  random.num_heads = 3;
  random.num_layers = 1;
  random.seed = 31;
  random.weight_std = 0.05f;
  write_random_medusa(dir.path.string(), target_model.config(), random);
  const MedusaBackend& heads = test::store().medusa(dir.path.string(), target_dir, BackendKind::kCuda);
  REQUIRE(heads.drafts_on_device());
  const int last = target_model.config().num_hidden_layers;
  const auto prompts = test::reference_prompts();
  const std::vector<TreeShape> shapes = head_shapes();
  const std::vector<DraftBound> bounds(shapes.size(), DraftBound{8});
  for (const auto& [name, sampling] : test::kSanitized ? std::span(kHeadModes).last(2) : std::span(kHeadModes)) {
    INFO(name);
    const bool stochastic = sampling.strategy == Strategy::kSample;
    const DistributionFn distribution = draft_distribution(sampling, DraftOptions{});
    const auto sampler = make_sampler(sampling);
    MedusaSide host{test::Engine(*target, 16, 128), heads.make_workspace(), {}};
    MedusaSide left{test::Engine(*target, 16, 128), heads.make_workspace(), {}};
    for (MedusaSide* side : {&host, &left}) {
      side->target.cache.keep_states({last}, target_model.config().hidden_size);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const std::vector<int>& p = prompts[i % prompts.size()];
        const std::vector<int> prompt(p.begin(), p.begin() + std::min<std::size_t>(p.size(), 12));
        const int seq = side->target.cache.create();
        side->target.prefill(seq, std::span(prompt).first(prompt.size() - 1));
        auto drafter = std::make_unique<MedusaDrafter>(heads, *side->heads, side->target.cache, seq, last, distribution,
                                                       stochastic, shapes[i], RowControls{}, draw_options(sampling));
        side->seqs.push_back(std::make_unique<SpeculativeSequence>(side->target.context(), seq, std::move(drafter),
                                                                   *sampler, prompt, Philox(17, i), VerifyRule::kToken));
      }
    }
    const std::vector<float> state(static_cast<std::size_t>(heads.config().hidden_size), 0.5f);
    const MedusaTree one{1, draw_options(sampling), {}, kDrawTopK, {}};
    compare_left_with_grown(host.target, host.seqs, left.target, left.seqs, shapes, bounds, sampling, false,
                            [&] { heads.enqueue_draws(state, 1, 1, std::span(&one, 1), *left.heads); });
  }
}

// One side of the EAGLE comparison below: a target engine keeping the head's tap layers, the
// head's cache, workspace and context, and the speculative sequences over them (destroyed
// first).
struct HeadSide {
  test::Engine target;
  KvCache head_cache;
  std::unique_ptr<Workspace> workspace;
  HeadForwardContext context;
  std::vector<std::unique_ptr<SpeculativeSequence>> seqs;
  HeadSide(const Backend& target_backend, const HeadBackend& head)
      : target(target_backend, 16, 128),
        head_cache(head.kv_layout(16), 128),
        workspace(head.make_workspace()),
        context{head, target_backend.config(), head_cache, *workspace} {
    const HeadConfig& c = head.config();
    target.cache.keep_states(c.tap_layers, c.num_taps() * target_backend.config().hidden_size);
  }
};

// An EAGLE head's chains, static trees and a chain with siblings drawn on its device and left there
// (HeadForwardContext::enqueue_chains: the catch-up's taps projected there, each level fed its
// parent's output state and the draws mapped to target ids there) give the verdicts, drafted
// and committed tokens of the same drafters growing them on the host round by round, over two
// steps: a random EAGLE-3 head over 3000 of draft-1m's tokens (a draft-to-target map) and a
// random EAGLE-1 head; greedy, T = 1 and top-k 1 as the Medusa comparison's (sanitized: the
// EAGLE-3 head, the two sampled modes, one step). Dynamic trees too (the EAGLE-3 head, 8 nodes
// taken 2 a round of the top 2 children, so that every batch finds its nodes and nodes under
// other nodes feed later rounds; greedy and T = 1; sanitized: T = 1), each later round's rows
// fed the positions and states the device chose for them. Draws a later enqueue on the head's
// workspace overwrote are refused.
TEST_CASE("cuda backend: EAGLE heads' proposals left on their device verify as those grown on the host", "[gpu]") {
  REQUIRE_GPU();
  const std::string target_dir = test::model_dir("draft-1m");
  const Model target_model(target_dir);
  const ModelConfig& config = target_model.config();
  const auto target = make_backend(BackendKind::kCuda, target_model, std::nullopt);
  static test::TempDir eagle3_dir, eagle1_dir;
  RandomHead e3;
  e3.tap_ids = {0, 1, config.num_hidden_layers};  // inputs of layers 0 and 1, the last layer's output
  e3.layout = HeadLayout::kSpeculators;
  e3.draft_vocab = 3000;
  e3.seed = 41;
  e3.weight_std = 0.05f;
  write_random_head(eagle3_dir.path.string(), config, e3);
  RandomHead e1;
  e1.kind = HeadKind::kEagle1;
  e1.seed = 42;
  e1.weight_std = 0.05f;
  write_random_head(eagle1_dir.path.string(), config, e1);
  const std::pair<const char*, HeadKind> kinds[] = {
      {"EAGLE-1", HeadKind::kEagle1}, {"EAGLE-3", HeadKind::kEagle3}, {"EAGLE-3, dynamic trees", HeadKind::kEagle3}};
  const auto prompts = test::reference_prompts();
  TreeShape dynamic;
  dynamic.dynamic_budget = 8;
  dynamic.dynamic_width = 2;
  dynamic.dynamic_top_k = 2;
  for (const auto& [kind_name, kind] : test::kSanitized ? std::span(kinds).last(2) : std::span(kinds)) {
    const bool grown = std::string(kind_name).find("dynamic") != std::string::npos;
    std::vector<TreeShape> shapes = grown ? std::vector<TreeShape>(3, dynamic) : head_shapes();
    std::vector<DraftBound> bounds(shapes.size(), DraftBound{8});
    if (!grown) {  // a chain of 2 with 2 siblings: a tree on the device, the chain first in the proposal
      shapes.push_back(TreeShape{chain_topology(2)});
      bounds.push_back(DraftBound{8, 0, 2});
    }
    const std::string& dir = kind == HeadKind::kEagle3 ? eagle3_dir.path.string() : eagle1_dir.path.string();
    const HeadBackend& head = test::store().head(dir, target_dir, BackendKind::kCuda, kind);
    REQUIRE(head.drafts_on_device());
    // Sanitized, greedy goes (the scheduler's test covers it); dynamic trees, top-k 1 too.
    const std::size_t first_mode = test::kSanitized ? 1 : 0;
    const std::span<const std::pair<const char*, SamplingOptions>> modes =
        std::span(kHeadModes).subspan(first_mode, (grown ? 2 : 3) - first_mode);
    for (const auto& [name, sampling] : modes) {
      INFO(kind_name << ", " << name);
      const bool stochastic = sampling.strategy == Strategy::kSample;
      const DistributionFn distribution = draft_distribution(sampling, DraftOptions{});
      const auto sampler = make_sampler(sampling);
      HeadSide host(*target, head), left(*target, head);
      for (HeadSide* side : {&host, &left}) {
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          const std::vector<int>& p = prompts[i % prompts.size()];
          const std::vector<int> prompt(p.begin(), p.begin() + std::min<std::size_t>(p.size(), 12));
          const int seq = side->target.cache.create();
          side->target.prefill(seq, std::span(prompt).first(prompt.size() - 1));
          auto drafter = std::make_unique<HeadDrafter>(side->context, side->head_cache.create(), side->target.cache, seq,
                                                       distribution, stochastic, shapes[i], RowControls{},
                                                       draw_options(sampling));
          side->seqs.push_back(std::make_unique<SpeculativeSequence>(
              side->target.context(), seq, std::move(drafter), *sampler, prompt, Philox(19, i), VerifyRule::kToken));
        }
      }
      const std::vector<int> tokens{5, 6, 7}, positions{0, 1, 2};
      const std::vector<double> uniforms(2, 0.5);
      const DeviceChain chain{{left.head_cache.create(), tokens, positions, {}, RowLogits::kLast}, 2,
                              draw_options(sampling), stochastic ? std::span<const double>(uniforms) : std::span<const double>(),
                              {}, kDrawTopK};
      const std::vector<float> taps(3 * static_cast<std::size_t>(head.config().num_taps() * config.hidden_size), 0.5f);
      compare_left_with_grown(host.target, host.seqs, left.target, left.seqs, shapes, bounds, sampling, true,
                              [&] { left.context.enqueue_chains(std::span(&chain, 1), taps); });
    }
  }
}

// Draft rounds replayed as graphs (a round's shape captured at its second sight) against the
// same rounds enqueued kernel by kernel (graphs off), over six proposals of two lanes: chains
// alone (the sampling kernel draws) and a chain beside a static tree (the children kernel
// draws), sampled through every filter; a long chain joins the chains' third proposal, so the
// draft buffer grows under graphs captured before (which then go). The same tokens and q, bitwise;
// graphs captured on one side only, none while a proposal repeats the shapes of the one before.
TEST_CASE("cuda backend: draft rounds replayed as graphs draw what rounds enqueued one by one draw", "[gpu]") {
  REQUIRE_GPU();
  const Model model(test::model_dir("draft-1m"));
  cuda::CudaOptions no_graphs;
  no_graphs.graphs = false;
  const auto replayed = make_backend(BackendKind::kCuda, model, std::nullopt);
  const auto enqueued = cuda::make_cuda_backend(model, std::nullopt, no_graphs);
  const SamplingOptions sampling = kModes[1].second;
  const std::vector<int> branching{2, 2};
  constexpr int kLong = 72;  // its q rows outgrow the draft buffer the others need
  const std::vector<DraftBound> bounds{DraftBound{8}, DraftBound{8}, DraftBound{kLong}};
  const std::vector<std::vector<TreeShape>> lane_sets{
      {TreeShape{chain_topology(3)}, TreeShape{chain_topology(2)}, TreeShape{chain_topology(kLong)}},
      {TreeShape{chain_topology(3)}, TreeShape{branching_topology(branching)}}};
  for (const std::vector<TreeShape>& shapes : lane_sets) {
    const bool grows = shapes.size() == 3;
    test::Engine replayed_engine(*replayed, 16, 128), enqueued_engine(*enqueued, 16, 128);
    std::vector<Lane> with_graphs = make_lanes(replayed_engine, sampling, shapes, true, 17);
    std::vector<Lane> without = make_lanes(enqueued_engine, sampling, shapes, true, 17);
    std::vector<std::size_t> captured;  // graphs the replaying side captured in each proposal
    for (int step = 0; step < 6; ++step) {
      INFO("proposal " << step);
      const std::size_t lanes = step == 2 && grows ? 3 : 2;
      for (std::size_t i = 0; i < lanes; ++i) {
        with_graphs[i].drafter->start(with_graphs[i].committed, bounds[i], with_graphs[i].rng);
        without[i].drafter->start(without[i].committed, bounds[i], without[i].rng);
      }
      const auto drafters = [&](std::vector<Lane>& side) {
        std::vector<Drafter*> out;
        for (std::size_t i = 0; i < lanes; ++i) out.push_back(side[i].drafter.get());
        return out;
      };
      const std::size_t before = cuda::cuda_live_graphs();
      run_draft_forwards(drafters(without));
      CHECK(cuda::cuda_live_graphs() == before);
      run_draft_forwards(drafters(with_graphs));
      captured.push_back(cuda::cuda_live_graphs() - before);
      for (std::size_t i = 0; i < lanes; ++i) {
        INFO("lane " << i);
        const Proposal g = with_graphs[i].drafter->take_proposal(), e = without[i].drafter->take_proposal();
        REQUIRE(g.tree.size() == e.tree.size());
        CHECK(g.tree.tokens == e.tree.tokens);
        CHECK(g.tree.parent == e.tree.parent);
        CHECK(g.q == e.q);
        // The first node accepted, then a bonus token.
        const std::vector<int> accepted{0};
        for (Lane* lane : {&with_graphs[i], &without[i]}) {
          lane->committed.push_back(e.tree.tokens[0]);
          lane->committed.push_back(static_cast<int>(i) + 5);
        }
        with_graphs[i].drafter->accept(g.tree, accepted, with_graphs[i].committed);
        without[i].drafter->accept(e.tree, accepted, without[i].committed);
      }
    }
    INFO("graphs captured per proposal: " << Catch::Detail::stringify(captured));
    CHECK(captured[1] > 0);  // the rounds of the second proposal repeat the shapes of the first's after its catch-up
    if (grows) {
      CHECK(captured[3] == 0);  // the buffer grew: its graphs went, and the shapes seen
      CHECK(captured[4] > 0);   // captured again
    }
    CHECK(captured[5] == 0);  // replayed
  }
}

// A head's rounds (plan_chain_rounds' state feeds): round 0 takes the taps' feature, and each
// node of a later round the output state of its parent context's row, the root context's being
// its chain's last first row: a chain of 3 after 4 first rows, a tree {-1, -1, 0, 0, 1} after 2;
// of dynamic trees, every later row its tree's root context row until the device says.
// HeadForwardContext::enqueue_chains refuses taps of the wrong size and the CPU head backend,
// each leaving the head's cache as it was.
TEST_CASE("device draft: a head's rounds feed each node its parent context's output state", "[engine]") {
  const std::string target_dir = test::model_dir("draft-1m");
  const ModelConfig& config = test::store().model(target_dir).config();
  static test::TempDir dir;
  RandomHead random;
  random.tap_ids = {0, 1, config.num_hidden_layers};
  random.layout = HeadLayout::kSpeculators;
  random.seed = 43;
  write_random_head(dir.path.string(), config, random);
  const HeadBackend& head = test::store().head(dir.path.string(), target_dir, BackendKind::kCpu, HeadKind::kEagle3);
  KvCache cache(head.kv_layout(16), 16);
  const std::vector<int> chain_tokens{1, 2, 3, 4}, chain_positions{0, 1, 2, 3}, tree_tokens{5, 6}, tree_positions{0, 1};
  const std::vector<int> tree_parents{-1, -1, 0, 0, 1};
  const int a = cache.create(), b = cache.create();
  const std::vector<DeviceChain> chains{
      DeviceChain{{a, chain_tokens, chain_positions, {}, RowLogits::kLast}, 3, DrawOptions{}, {}, {}, kDrawTopK},
      DeviceChain{{b, tree_tokens, tree_positions, {}, RowLogits::kLast}, 5, DrawOptions{1.0f}, {}, tree_parents, kDrawTopK}};
  {
    KvCache planned(head.kv_layout(16), 16);
    planned.create();
    planned.create();
    const ChainRounds plan = plan_chain_rounds(planned, config, chains, false);
    CHECK(plan.round_rows == std::vector<int>{6, 3, 1});
    // Round 1: the chain's node 0 (row 6) and the tree's nodes 0 and 1 (rows 7, 8); round 2: the
    // chain's node 1 (row 9); the tree's level 2 are leaves.
    CHECK(plan.state_feeds == std::vector<int>{-1, -1, -1, -1, -1, -1, 3, 5, 5, 6});
    std::vector<DeviceChain> trees = chains;
    for (DeviceChain& c : trees) {
      c = DeviceChain{c.first, 4, DrawOptions{1.0f}, {}, {}, kDrawTopK, 2, 2};
      c.first.seq = planned.create();
    }
    const ChainRounds grown = plan_dynamic_rounds(planned, config, trees);
    CHECK(grown.round_rows == std::vector<int>{6, 4});
    CHECK(grown.state_feeds == std::vector<int>{-1, -1, -1, -1, -1, -1, 3, 3, 5, 5});
  }
  const auto workspace = head.make_workspace();
  const HeadForwardContext context{head, config, cache, *workspace};
  const std::size_t width = static_cast<std::size_t>(head.config().num_taps() * config.hidden_size);
  const std::vector<float> taps(6 * width, 0.5f);
  CHECK_THROWS_WITH(context.enqueue_chains(chains, taps), Contains("only 'cuda' draws them on its device"));
  CHECK_THROWS_WITH(context.enqueue_chains(chains, std::span(taps).first(5 * width)),
                    Contains("taps hold") && Contains("the 6 first rows"));
  CHECK(cache.length(a) == 0);
  CHECK(cache.length(b) == 0);
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

  // Logit controls: rows 0, 2 and 3 under one set, row 2 edited over draw 1, row 3 over draw 0.
  PathEdits edits;
  edits.edits = {TokenEdit{3}, TokenEdit{9}};
  DraftRounds controlled = good;
  controlled.controls = DraftControls{{&edits}, {0, -1, 0, 0}, {0, 0, 0, 1, 2}, {1, 0}};
  CHECK_NOTHROW(check_draft_rounds(controlled, vocab));
  d = controlled;
  d.controls.path_draws[1] = 2;  // its own round's draw
  refused(d, "logit row 3's path holds draw 2");
  d = controlled;
  d.controls.row_set[1] = 1;
  refused(d, "logit row 1 takes control set 1");
  d = controlled;
  d.controls.path_first.pop_back();
  refused(d, "controls of 4 logit rows and 4 path starts");
  PathEdits unordered = edits;
  unordered.edits = {TokenEdit{9}, TokenEdit{3}};
  d = controlled;
  d.controls.sets = {&unordered};
  refused(d, "control set 0: edit 1 has token 3");
  PathEdits no_penalty = edits;
  no_penalty.repetition = 0;
  d = controlled;
  d.controls.sets = {&no_penalty};
  refused(d, "control set 0: penalties 0");

  // The CPU backend draws on the host: it refuses forward_draft by name, and run_chains leaves
  // every sequence as it was.
  const auto cpu = make_backend(BackendKind::kCpu, model, std::nullopt);
  CHECK_FALSE(cpu->drafts_on_device());
  const auto workspace = cpu->make_workspace();
  std::vector<int> tokens(4);
  CHECK_THROWS_WITH(cpu->forward_draft(good, cache.storage(), *workspace, tokens, {}, {}),
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
  // Dynamic trees: one shape a call, their parents out, no q.
  DeviceChain grown{{seq, prompt, positions, {}, RowLogits::kLast}, 2, DrawOptions{1.0f}, {}, {}, kDrawTopK, 2, 2};
  std::vector<int> parents(2), parents4(4), out4(4);
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{grown}, out, {}, parents), Contains("not implemented"));
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{grown}, out, {}), Contains("parents holds 0 entries; need 2"));
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{grown}, out, q, parents), Contains("dynamic trees give no q"));
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{grown, chain}, out4, {}, parents4),
                    Contains("chain 1 is not a dynamic tree of chain 0's budget 2"));
  CHECK_THROWS_WITH(ctx.enqueue_chains(std::vector{grown}), Contains("not implemented"));
  grown.dynamic_top_k = 0;
  CHECK_THROWS_WITH(ctx.run_chains(std::vector{grown}, out, {}, parents), Contains("dynamic tree 0 has top_k 0"));
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
  // The outputs first, then the upload, round 0's step last.
  CHECK(up.at.tokens == 0);
  CHECK(up.at.probs >= 4 * sizeof(int));
  CHECK(up.upload_at >= up.at.probs + 2 * static_cast<std::size_t>(vocab) * sizeof(float));
  CHECK(up.device_bytes == up.upload_at + up.upload_bytes);
  CHECK(up.step_at[0] > up.step_at[1]);
  CHECK(up.step_at[0] + up.steps[0].data.size() * 4 == up.device_bytes);
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(up.step_at[r] % cuda::kAlign == 0);
    CHECK(std::memcmp(up.data.data() + (up.step_at[r] - up.upload_at), up.steps[r].data.data(),
                      up.steps[r].data.size() * 4) == 0);
  }
  const auto ints = [](const cuda::DraftUpload& u, std::size_t at, int n) {
    std::vector<int> v(static_cast<std::size_t>(n));
    std::memcpy(v.data(), u.data.data() + (at - u.upload_at), v.size() * sizeof(int));
    return v;
  };
  const auto uniform = [](const cuda::DraftUpload& u, int d) {
    double x = 0;
    std::memcpy(&x, u.data.data() + (u.at.uniforms - u.upload_at) + static_cast<std::size_t>(d) * sizeof(double),
                sizeof(double));
    return x;
  };
  CHECK(ints(up, up.feeds_of(1), 2) == std::vector<int>{1, 0});  // round 0's rows are fed nothing
  CHECK(ints(up, up.at.top_k, 4) == std::vector<int>{0, 3, 0, 0});
  CHECK(uniform(up, 1) == 0.25);
  CHECK(up.probs_row(1, false) == 0);
  draft.keep_q = true;
  const cuda::DraftUpload kept = cuda::pack_draft(draft, vocab, 0, options, 1);
  CHECK(kept.probs_rows == 4);
  CHECK(kept.probs_row(1, true) == 2);
  CHECK(kept.upload_at >= kept.at.probs + 4 * static_cast<std::size_t>(vocab) * sizeof(float));
  CHECK_FALSE(kept.children);
  CHECK(kept.round_shape(1, true) != up.round_shape(1, false));

  // A later round's shape does not depend on the first round's row count; the first round's does.
  KvCache other_cache(model.kv_layout(16), 64);
  DraftRounds longer = two_rounds(other_cache, model.config(), 40);
  longer.keep_q = true;
  const cuda::DraftUpload longer_up = cuda::pack_draft(longer, vocab, 0, options, 1);
  CHECK(longer_up.first_row == std::vector<int>{0, 42, 44});
  CHECK(longer_up.round_shape(1, true) == kept.round_shape(1, true));
  CHECK(longer_up.round_shape(0, true) != kept.round_shape(0, true));
  CHECK(cuda::pack_draft(longer, vocab, 0, options, 2).round_shape(1, true) != kept.round_shape(1, true));  // other pages

  // Controls: each logit row's PathEditRow in the upload; what the rows read after round 0's
  // step, so that no round's shape moves with the edits' count.
  const int eos[] = {2};
  PathEdits few, many;
  few.edits = {TokenEdit{3}};
  many.edits = {TokenEdit{3}, TokenEdit{5}, TokenEdit{9}};
  few.eos_ids = many.eos_ids = eos;
  many.eos_until = 2;
  DraftRounds controlled = draft;
  controlled.controls = DraftControls{{&few}, {0, -1, 0, 0}, {0, 0, 0, 1, 2}, {1, 0}};
  const cuda::DraftUpload with_few = cuda::pack_draft(controlled, vocab, 0, options, 1);
  controlled.controls.sets = {&many};
  const cuda::DraftUpload with_many = cuda::pack_draft(controlled, vocab, 0, options, 1);
  CHECK(with_many.controls);
  CHECK_FALSE(kept.controls);
  for (int r = 0; r < 2; ++r) {
    CHECK(with_few.round_shape(r, true) == with_many.round_shape(r, true));
    CHECK(with_many.round_shape(r, true) != kept.round_shape(r, true));
  }
  CHECK(with_many.device_bytes == with_many.upload_at + with_many.upload_bytes);
  std::vector<cuda::PathEditRow> rows(4);
  std::memcpy(rows.data(), with_many.data.data() + (with_many.at.edit_rows - with_many.upload_at),
              rows.size() * sizeof(cuda::PathEditRow));
  const auto at = [&](std::int64_t offset) { return with_many.data.data() + (offset - static_cast<std::int64_t>(with_many.upload_at)); };
  const std::int64_t after_steps = static_cast<std::int64_t>(with_many.step_at[0] + with_many.steps[0].data.size() * 4);
  CHECK(rows[1].edits == 0);
  CHECK(rows[1].path == 0);
  CHECK(rows[1].eos == 0);
  for (const std::size_t l : {0u, 2u, 3u}) {
    INFO("logit row " << l);
    CHECK(rows[l].edits == 3);
    CHECK(rows[l].eos == 1);
    CHECK(rows[l].eos_until == 2);
    CHECK(rows[l].edits_at == rows[0].edits_at);  // one copy of the set's edits
    CHECK(rows[l].edits_at >= after_steps);
    CHECK(rows[l].path == (l == 0 ? 0 : 1));
  }
  int path_draw = -1, eos_id = -1;
  std::memcpy(&path_draw, at(rows[2].path_at), sizeof(int));
  CHECK(path_draw == 1);
  std::memcpy(&path_draw, at(rows[3].path_at), sizeof(int));
  CHECK(path_draw == 0);
  std::memcpy(&eos_id, at(rows[0].eos_at), sizeof(int));
  CHECK(eos_id == 2);
  TokenEdit last;
  std::memcpy(&last, at(rows[0].edits_at) + 2 * sizeof(TokenEdit), sizeof(TokenEdit));
  CHECK(last.token == 9);

  // Children: the logit rows draw 2, 0, 1 and 1 (5 draws); round 1's rows were fed draws 1 and 0.
  draft.keep_q = false;
  draft.children = {2, 0, 1, 2};
  draft.child_modes = {kDrawWithoutReplacement, kDrawTopK, kDrawSampled, kDrawTopK};
  draft.uniforms = {0.1, 0.2, 0.3, 0.4, 0.5};
  const cuda::DraftUpload tree = cuda::pack_draft(draft, vocab, 0, options, 1);
  CHECK(tree.children);
  CHECK(tree.first_logit == std::vector<int>{0, 2, 4});
  CHECK(tree.first_draw == std::vector<int>{0, 2, 5});
  CHECK(ints(tree, tree.feeds_of(1), 2) == std::vector<int>{1, 0});
  CHECK(ints(tree, tree.at.child_first, 5) == std::vector<int>{0, 2, 2, 3, 5});
  CHECK(ints(tree, tree.at.child_modes, 4) == draft.child_modes);
  CHECK(ints(tree, tree.at.sources, 4) == std::vector<int>{-1, -1, 1, 0});
  CHECK(uniform(tree, 4) == 0.5);
  CHECK(tree.at.probs >= tree.at.tokens + 5 * sizeof(int));
  CHECK(tree.upload_at >= tree.at.probs + 2 * static_cast<std::size_t>(vocab) * sizeof(float));
  CHECK(tree.round_shape(1, false) != up.round_shape(1, false));
}

// One sequence of `cache` grown as a dynamic tree of `budget` nodes taken two a round (top_k
// 3): its prompt, then each later round's two placeholder rows under every earlier node.
DraftRounds dynamic_rounds_of(KvCache& cache, const ModelConfig& config, int budget) {
  static const std::vector<int> prompt{5, 6, 7}, positions{0, 1, 2}, placeholders{0, 0}, at{3, 3},
      chain{-1, 0, 1, 2, 3, 4, 5, 6};
  const int seq = cache.create();
  DraftRounds draft;
  draft.dynamic = DynamicDraft{budget, 2, 3};
  for (int r = 0; r < dynamic_rounds(budget, 2); ++r) {
    const SequenceRows part = r == 0 ? SequenceRows{seq, prompt, positions, {}, RowLogits::kLast}
                                     : SequenceRows{seq, placeholders, at, std::span(chain).first(2 * static_cast<std::size_t>(r)),
                                                    RowLogits::kAll};
    RaggedBatch batch = plan_batch(std::span(&part, 1), cache.tables(), config);
    draft.plans.push_back(cache.prepare(batch.seqs, batch.rows_per_seq()));
    draft.feeds.insert(draft.feeds.end(), part.tokens.size(), -1);
    const int contexts = batch.num_logits();
    draft.options.insert(draft.options.end(), static_cast<std::size_t>(contexts), DrawOptions{1.0f});
    draft.children.insert(draft.children.end(), static_cast<std::size_t>(contexts), 3);
    draft.child_modes.insert(draft.child_modes.end(), static_cast<std::size_t>(contexts), kDrawTopK);
    draft.uniforms.insert(draft.uniforms.end(), 3 * static_cast<std::size_t>(contexts), 0.0);
    draft.batches.push_back(std::move(batch));
  }
  return draft;
}

TEST_CASE("device draft: dynamic rounds are refused naming the field, and laid out with their nodes", "[engine]") {
  const Model model(test::model_dir("draft-1m"));
  const ModelConfig& config = model.config();
  const int vocab = config.vocab_size;
  KvCache cache(model.kv_layout(16), 64);
  const DraftRounds good = dynamic_rounds_of(cache, config, 6);
  REQUIRE(good.rounds() == 3);
  CHECK(good.dynamic_nodes() == 6);
  CHECK_NOTHROW(check_draft_rounds(good, vocab));
  const auto refused = [&](DraftRounds d, const std::string& what) {
    CHECK_THROWS_WITH(check_draft_rounds(d, vocab), Contains("device draft") && Contains(what));
  };
  DraftRounds d = good;
  d.dynamic.budget = 8;  // four rounds
  refused(d, "grow in 4 rounds, not 3");
  d = good;
  d.dynamic.width = 0;
  refused(d, "each must be >= 1");
  d = good;
  d.feeds.back() = 0;
  refused(d, "the device writes its token");
  d = good;
  d.child_modes[1] = kDrawSampled;
  refused(d, "it needs 3 by kDrawTopK");
  d = good;
  d.keep_q = true;
  refused(d, "keep no q");
  KvCache other(model.kv_layout(16), 64);
  d = dynamic_rounds_of(other, config, 6);
  d.batches[2] = plan_batch(std::vector<SequenceRows>{{0, std::vector<int>{0, 0}, std::vector<int>{3, 3}, std::vector<int>{-1, 0, 1, -1}, RowLogits::kAll}},
                            other.tables(), config);
  refused(d, "node 3 needs 4");

  const cuda::CudaOptions options;
  const cuda::DraftUpload up = cuda::pack_draft(good, vocab, 0, options, 1);
  CHECK(up.dynamic.budget == 6);
  CHECK(up.sequences == 1);
  CHECK(up.pool_cap == (1 + 2 * 2) * 3);  // the root's children, then those of two batches
  // The nodes and candidates sit with the outputs, before the upload.
  CHECK(up.at.node_tokens >= up.at.probs + static_cast<std::size_t>(up.probs_rows) * static_cast<std::size_t>(vocab) * 4);
  CHECK(up.at.pool % alignof(cuda::DynamicCandidate) == 0);
  CHECK(up.upload_at >= up.at.pool_size + sizeof(int));
  // Round 1's kernels write round 2's rows: its shape names them, the last round's none.
  cuda::DraftUpload moved = up;
  moved.step_at[2] += cuda::kAlign;
  CHECK(moved.round_shape(1, false) != up.round_shape(1, false));
  CHECK(moved.round_shape(2, false) != up.round_shape(2, false));
  moved = up;
  moved.at.pool += cuda::kAlign;
  CHECK(moved.round_shape(0, false) != up.round_shape(0, false));
}

}  // namespace
}  // namespace specula
