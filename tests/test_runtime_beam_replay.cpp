// The replay of speculative beam search (runtime/beam_replay.h) on hand-built trees over toy
// logits (a pure function of the history): trees holding exactly the beams plain beam search
// chooses up to depth k make the replay stop at depth k + 1 (k = 0: the needed candidate is
// missing at depth 1), or never stop until the search ends when they cover it all; in every
// case the search's state equals plain beam search's after the same number of steps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "base/rng.h"
#include "runtime/beam_replay.h"

namespace specula {
namespace {

using History = std::vector<int>;

constexpr int kVocab = 6;
const std::vector<int> kEos = {5};

// Logits in [-3, 3) from a Philox stream keyed by a hash of the history.
std::vector<float> toy_logits(const History& history, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  for (int t : history) h = (h ^ uint64_t(t + 1)) * 1099511628211ull;
  Philox rng(seed, h);
  std::vector<float> out(kVocab);
  for (float& l : out) l = float(6 * rng.uniform() - 3);
  return out;
}

// Plain beam search: `steps` steps of `search` over toy logits (stops early when done).
void plain_steps(BeamSearch& search, const History& prompt, uint64_t seed, int steps,
                 std::vector<std::vector<History>>* beams_after = nullptr) {
  for (int s = 0; s < steps && !search.done(); ++s) {
    std::vector<std::vector<float>> logits;
    for (int b = 0; b < search.num_beams(); ++b) {
      History h = prompt;
      h.insert(h.end(), search.tokens(b).begin(), search.tokens(b).end());
      logits.push_back(toy_logits(h, seed));
    }
    std::vector<std::span<const float>> rows(logits.begin(), logits.end());
    search.step(rows);
    if (beams_after) {
      beams_after->emplace_back();
      for (int b = 0; b < search.num_beams(); ++b) beams_after->back().push_back(search.tokens(b));
    }
  }
}

// One live beam's tree (holding every beam plain search reaches from it within k steps, plus
// a distractor sibling per beam and level) and the target logits at its contexts.
struct HandTree {
  TokenTree tree{SiblingDraw::kTopK};
  std::vector<float> logits;
};

std::vector<HandTree> hand_trees(const BeamSearch& search, const History& prompt, uint64_t seed, int k) {
  BeamSearch ahead = search;
  std::vector<std::vector<History>> reached;  // [step][beam] the tokens of each beam
  plain_steps(ahead, prompt, seed, k, &reached);
  std::vector<HandTree> trees(static_cast<std::size_t>(search.num_beams()));
  for (int o = 0; o < search.num_beams(); ++o) {
    const History& base = search.tokens(o);
    HandTree& t = trees[static_cast<std::size_t>(o)];
    std::map<History, int> node_of;  // new tokens -> node
    auto add = [&](const History& path) {
      if (node_of.count(path)) return;
      const History parent(path.begin(), path.end() - 1);
      node_of[path] = t.tree.add_node(parent.empty() ? -1 : node_of.at(parent), path.back());
    };
    for (const auto& step : reached)
      for (const History& tokens : step)
        if (std::equal(base.begin(), base.end(), tokens.begin())) {
          const History path(tokens.begin() + static_cast<long>(base.size()), tokens.end());
          for (std::size_t len = 1; len <= path.size(); ++len) add(History(path.begin(), path.begin() + long(len)));
          // A distractor: a sibling not in the tree yet (harmless at depths <= k: a chosen
          // beam there is in the tree anyway).
          History sibling(path);
          for (int token = 0; token < kVocab; ++token) {
            sibling.back() = token;
            if (!node_of.count(sibling)) {
              add(sibling);
              break;
            }
          }
        }
    // Target logits per context: 0 = after the beam's tokens, 1 + i = after node i.
    for (int c = 0; c < t.tree.num_contexts(); ++c) {
      History h = prompt;
      h.insert(h.end(), base.begin(), base.end());
      History path;
      for (int node = c - 1; node >= 0; node = t.tree.parent[static_cast<std::size_t>(node)])
        path.insert(path.begin(), t.tree.tokens[static_cast<std::size_t>(node)]);
      h.insert(h.end(), path.begin(), path.end());
      const std::vector<float> row = toy_logits(h, seed);
      t.logits.insert(t.logits.end(), row.begin(), row.end());
    }
  }
  return trees;
}

BeamReplay replay(BeamSearch& search, const std::vector<HandTree>& trees) {
  std::vector<BeamTree> views;
  for (const HandTree& t : trees) views.push_back({&t.tree, t.logits});
  return replay_beam_trees(search, views, kVocab);
}

// The replay left `search` where plain search is after as many steps, and each beam's origin
// and path name its tokens.
void check_against_plain(const BeamSearch& before, const BeamSearch& after, const BeamReplay& r,
                         const std::vector<HandTree>& trees, const History& prompt, uint64_t seed) {
  BeamSearch plain = before;
  plain_steps(plain, prompt, seed, r.depths);
  REQUIRE(plain.steps() == after.steps());
  REQUIRE(plain.done() == after.done());
  REQUIRE(plain.num_beams() == after.num_beams());
  REQUIRE(int(r.beams.size()) == after.num_beams());
  for (int b = 0; b < after.num_beams(); ++b) {
    CHECK(after.tokens(b) == plain.tokens(b));
    const ReplayedBeam& rb = r.beams[static_cast<std::size_t>(b)];
    const History& origin = before.tokens(rb.origin);
    REQUIRE(int(rb.path.size()) == r.depths - 1);
    History expected = origin;
    for (int node : rb.path) expected.push_back(trees[static_cast<std::size_t>(rb.origin)].tree.tokens[static_cast<std::size_t>(node)]);
    CHECK(std::equal(expected.begin(), expected.end(), after.tokens(b).begin()));
    CHECK(after.tokens(b).size() == expected.size() + 1);
  }
}

}  // namespace

TEST_CASE("beam replay stops at the first depth whose chosen beam was not drafted", "[runtime][beam]") {
  const History prompt = {1, 2};
  for (uint64_t seed = 0; seed < 8; ++seed) {
    for (int width : {1, 2, 3}) {
      for (int k : {0, 1, 3}) {  // k = 0: missing at depth 1; else at depth k + 1
        INFO("seed " << seed << " width " << width << " k " << k);
        BeamSearch search(SamplingOptions::beam(width, 1.0f), 12, kEos, kVocab);
        // Pass 1 from the prompt beam, then pass 2 from several beams.
        for (int pass = 0; pass < 2 && !search.done(); ++pass) {
          const BeamSearch before = search;
          const std::vector<HandTree> trees = hand_trees(search, prompt, seed, k);
          const BeamReplay r = replay(search, trees);
          check_against_plain(before, search, r, trees, prompt, seed);
          if (!search.done()) CHECK(r.depths == k + 1);
          else CHECK(r.depths <= k + 1);
        }
      }
    }
  }
}

TEST_CASE("beam replay never stops while the trees cover the search: one pass is the whole search",
          "[runtime][beam]") {
  const History prompt = {3};
  for (uint64_t seed = 0; seed < 8; ++seed) {
    for (float length_penalty : {0.6f, 1.0f, 1.5f}) {
      INFO("seed " << seed << " length penalty " << length_penalty);
      const int max_new = 5, width = 2;
      BeamSearch search(SamplingOptions::beam(width, length_penalty), max_new, kEos, kVocab);
      const BeamSearch before = search;
      const std::vector<HandTree> trees = hand_trees(search, prompt, seed, max_new);
      const BeamReplay r = replay(search, trees);
      REQUIRE(search.done());
      CHECK(r.beams.empty());
      check_against_plain(before, search, r, trees, prompt, seed);
      BeamSearch plain = before;
      plain_steps(plain, prompt, seed, max_new);
      const BeamResult got = std::move(search).result(width), want = std::move(plain).result(width);
      REQUIRE(got.hypotheses.size() == want.hypotheses.size());
      for (std::size_t i = 0; i < got.hypotheses.size(); ++i) {
        CHECK(got.hypotheses[i].tokens == want.hypotheses[i].tokens);
        CHECK(got.hypotheses[i].score == want.hypotheses[i].score);  // bitwise: the same rows
        CHECK(got.hypotheses[i].sum_logprob == want.hypotheses[i].sum_logprob);
      }
    }
  }
}

TEST_CASE("beam replay with empty trees takes exactly one step per pass", "[runtime][beam]") {
  BeamSearch search(SamplingOptions::beam(3, 1.0f), 6, kEos, kVocab);
  const History prompt = {4, 4};
  while (!search.done()) {
    const BeamSearch before = search;
    std::vector<HandTree> trees(static_cast<std::size_t>(search.num_beams()));
    for (int b = 0; b < search.num_beams(); ++b) {
      History h = prompt;
      h.insert(h.end(), search.tokens(b).begin(), search.tokens(b).end());
      trees[static_cast<std::size_t>(b)].logits = toy_logits(h, 99);
    }
    const BeamReplay r = replay(search, trees);
    CHECK(r.depths == 1);
    check_against_plain(before, search, r, trees, prompt, 99);
  }
}

}  // namespace specula
