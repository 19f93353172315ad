// Beam search on toy models whose logits are a pure function of the token history:
// width 1 equals greedy; a beam as wide as the search space equals brute force over every
// sequence; scores match a direct computation; a hand-traced run pins HF's EOS, length
// and early-stopping rules; every fork is released, also when the model throws.  With logit
// controls, on random control settings: the search equals Hugging Face's beam search with its
// logits processors written out (processors on the log-softmax row, the edited scores
// accumulated); min_new_tokens keeps every hypothesis's EOS at or after the minimum.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "base/error.h"
#include "sampling/beam_search.h"
#include "sampling/logit_controls.h"
#include "sampling/sampler.h"
#include "base/rng.h"

using namespace specula;

namespace {

using History = std::vector<int>;
using LogitFunction = std::function<void(const History&, std::span<float>)>;

// Sequences are histories; fork copies one.  Counts live sequences and checks the driver's
// use of the interface.
class ToyModel final : public BeamLanguageModel {
 public:
  ToyModel(int vocab, LogitFunction logits) : vocab_(vocab), logits_(std::move(logits)) {}

  int vocab_size() const override { return vocab_; }
  int fork(int seq) override {
    REQUIRE(live_.count(seq));
    live_[next_id_] = live_[seq];
    ++forks_;
    return next_id_++;
  }
  void release(int seq) override {
    REQUIRE(live_.count(seq));
    live_.erase(seq);
  }
  void step(std::span<const int> seqs, std::span<const int> tokens, std::span<float> logits) override {
    REQUIRE(seqs.size() == tokens.size());
    REQUIRE(logits.size() == seqs.size() * vocab_);
    REQUIRE(std::set<int>(seqs.begin(), seqs.end()).size() == seqs.size());
    if (++steps_ == fail_at_step_) throw std::runtime_error("toy model failure");
    for (size_t i = 0; i < seqs.size(); ++i) {
      REQUIRE(live_.count(seqs[i]));
      live_[seqs[i]].push_back(tokens[i]);
      logits_(live_[seqs[i]], logits.subspan(i * vocab_, vocab_));
    }
  }

  // A caller-owned sequence holding `prompt`; returns its id and next-token logits.
  int add_root(const History& prompt, std::vector<float>& root_logits) {
    live_[next_id_] = prompt;
    root_logits.resize(vocab_);
    logits_(prompt, root_logits);
    return next_id_++;
  }
  void logits(const History& history, std::span<float> out) const { logits_(history, out); }
  const std::map<int, History>& live() const { return live_; }
  int forks() const { return forks_; }
  int steps() const { return steps_; }
  void fail_at_step(int step) { fail_at_step_ = step; }

 private:
  int vocab_;
  LogitFunction logits_;
  std::map<int, History> live_;
  int next_id_ = 100;
  int forks_ = 0, steps_ = 0, fail_at_step_ = -1;
};

// Logits in [-3, 3) from a Philox stream keyed by a hash of the history.
LogitFunction random_logits(uint64_t seed) {
  return [seed](const History& history, std::span<float> out) {
    uint64_t h = 1469598103934665603ull;
    for (int t : history) h = (h ^ uint64_t(t + 1)) * 1099511628211ull;
    Philox rng(seed, h);
    for (float& l : out) l = float(6 * rng.uniform() - 3);
  };
}

double log_softmax(std::span<const float> logits, int token) {
  double max = -INFINITY, sum = 0;
  for (float l : logits) max = std::max(max, double(l));
  for (float l : logits) sum += std::exp(l - max);
  return logits[token] - max - std::log(sum);
}

// The sum of log-probs of `tokens` after `prompt`, recomputed from the model directly.
double sum_logprob(const ToyModel& model, History history, const std::vector<int>& tokens) {
  std::vector<float> logits(model.vocab_size());
  double sum = 0;
  for (int t : tokens) {
    model.logits(history, logits);
    sum += log_softmax(logits, t);
    history.push_back(t);
  }
  return sum;
}

// Every complete sequence: ended by EOS (EOS included) or max_new_tokens long without it.
void enumerate(const ToyModel& model, const History& prompt, std::vector<int>& tokens, int max_new,
               const std::vector<int>& eos, std::vector<BeamHypothesis>& out, double length_penalty) {
  for (int t = 0; t < model.vocab_size(); ++t) {
    tokens.push_back(t);
    if (std::count(eos.begin(), eos.end(), t) || int(tokens.size()) == max_new) {
      const double sum = sum_logprob(model, prompt, tokens);
      out.push_back({tokens, sum, sum / std::pow(double(tokens.size()), length_penalty)});
    } else {
      enumerate(model, prompt, tokens, max_new, eos, out, length_penalty);
    }
    tokens.pop_back();
  }
}

}  // namespace

TEST_CASE("beam width 1 equals greedy decoding", "[sampling]") {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const int vocab = 6, eos = 5, max_new = 12;
    ToyModel model(vocab, random_logits(seed));
    const History prompt = {1, 2, 3};
    std::vector<float> root_logits;
    const int root = model.add_root(prompt, root_logits);

    History greedy, history = prompt;
    std::vector<float> logits = root_logits;
    while (int(greedy.size()) < max_new) {
      greedy.push_back(argmax(logits));
      if (greedy.back() == eos) break;
      history.push_back(greedy.back());
      model.logits(history, logits);
    }

    for (float length_penalty : {1.0f, 0.0f, 2.0f}) {
      const BeamResult result = beam_search(model, root, root_logits, SamplingOptions::beam(1, length_penalty), max_new, std::vector<int>{eos}, 1);
      INFO("seed " << seed << " length penalty " << length_penalty);
      REQUIRE(result.hypotheses.size() == 1);
      CHECK(result.hypotheses[0].tokens == greedy);
      CHECK(model.live().size() == 1);
    }
  }
}

TEST_CASE("a beam as wide as the search space equals brute force", "[sampling]") {
  // 3 tokens + EOS, 4 new tokens: 40 sequences end in EOS, 81 reach the limit.  W = 121
  // keeps every one: no candidate is cut (at most 27 * 4 = 108 < 2W per step), every EOS
  // ranks below W, and the finished set never fills before the end, so nothing stops early.
  const int vocab = 4, eos = 3, max_new = 4, width = 121;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    for (float length_penalty : {1.0f, 0.0f, 2.5f, -0.5f}) {
      ToyModel model(vocab, random_logits(100 + seed));
      const History prompt = {2, 0};
      std::vector<float> root_logits;
      const int root = model.add_root(prompt, root_logits);

      std::vector<BeamHypothesis> all;
      std::vector<int> tokens;
      enumerate(model, prompt, tokens, max_new, {eos}, all, length_penalty);
      REQUIRE(all.size() == 121);
      std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.score > b.score; });

      for (int n_best : {1, 10, 121}) {
        const BeamResult result =
            beam_search(model, root, root_logits, SamplingOptions::beam(width, length_penalty), max_new, std::vector<int>{eos}, n_best);
        INFO("seed " << seed << " length penalty " << length_penalty << " n-best " << n_best);
        REQUIRE(int(result.hypotheses.size()) == n_best);
        for (int i = 0; i < n_best; ++i) {
          CHECK(result.hypotheses[i].tokens == all[i].tokens);
          CHECK(result.hypotheses[i].sum_logprob == Approx(all[i].sum_logprob).epsilon(1e-12).margin(1e-12));
          CHECK(result.hypotheses[i].score == Approx(all[i].score).epsilon(1e-12).margin(1e-12));
        }
        CHECK(model.live().size() == 1);
        CHECK(model.live().at(root) == prompt);
      }
    }
  }
}

TEST_CASE("a hypothesis ends at any of the EOS ids (brute force with two)", "[sampling]") {
  // Tokens 0-2 + EOS ids 3 and 4, 3 new tokens: 2 + 3 * 2 + 9 * 5 = 53 complete sequences;
  // W = 53 keeps them all (at most 9 * 5 = 45 < W candidates per step, so no EOS is dropped).
  const int vocab = 5, max_new = 3, width = 53;
  const std::vector<int> eos = {3, 4};
  for (uint64_t seed = 0; seed < 4; ++seed) {
    ToyModel model(vocab, random_logits(300 + seed));
    const History prompt = {1};
    std::vector<float> root_logits;
    const int root = model.add_root(prompt, root_logits);
    std::vector<BeamHypothesis> all;
    std::vector<int> tokens;
    enumerate(model, prompt, tokens, max_new, eos, all, 1.0);
    REQUIRE(all.size() == 53);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
    const BeamResult result = beam_search(model, root, root_logits, SamplingOptions::beam(width, 1.0f), max_new, eos, width);
    REQUIRE(result.hypotheses.size() == all.size());
    for (std::size_t i = 0; i < all.size(); ++i) CHECK(result.hypotheses[i].tokens == all[i].tokens);
    // Both ids ended hypotheses before the limit (a search stopping at the first alone would
    // extend the hypotheses ending in 4).
    for (int id : eos)
      CHECK(std::any_of(result.hypotheses.begin(), result.hypotheses.end(),
                        [&](const auto& h) { return h.tokens.size() < 3 && h.tokens.back() == id; }));
    CHECK(model.live().size() == 1);
  }
}

TEST_CASE("beam scores match a direct computation and n-best is sorted", "[sampling]") {
  const int vocab = 50, eos = 0, max_new = 10;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    ToyModel model(vocab, random_logits(500 + seed));
    const History prompt = {7};
    std::vector<float> root_logits;
    const int root = model.add_root(prompt, root_logits);
    const float length_penalty = seed % 2 ? 1.0f : 0.6f;
    const BeamResult result = beam_search(model, root, root_logits, SamplingOptions::beam(5, length_penalty), max_new, std::vector<int>{eos}, 5);
    REQUIRE(result.hypotheses.size() == 5);
    for (size_t i = 0; i < result.hypotheses.size(); ++i) {
      const BeamHypothesis& h = result.hypotheses[i];
      REQUIRE(!h.tokens.empty());
      CHECK(int(h.tokens.size()) <= max_new);
      // EOS only ever ends a hypothesis; one shorter than the limit must end with it.
      CHECK(std::find(h.tokens.begin(), h.tokens.end() - 1, eos) == h.tokens.end() - 1);
      if (int(h.tokens.size()) < max_new) CHECK(h.tokens.back() == eos);
      CHECK(h.sum_logprob == Approx(sum_logprob(model, prompt, h.tokens)).epsilon(1e-12));
      CHECK(h.score == Approx(h.sum_logprob / std::pow(double(h.tokens.size()), length_penalty)).epsilon(1e-12));
      if (i > 0) CHECK(result.hypotheses[i - 1].score >= h.score);
    }
    CHECK(model.forks() > 0);
    CHECK(model.live().size() == 1);
  }
}

namespace {

// Tokens: 0 = EOS, 1 = A, 2 = B; logits are log-probabilities from a table by history,
// uniform for histories not in the table.
LogitFunction table_logits(std::map<History, std::vector<float>> table) {
  return [table](const History& history, std::span<float> out) {
    const auto it = table.find(history);
    for (int t = 0; t < 3; ++t) out[t] = it == table.end() ? std::log(1 / 3.0f) : std::log(it->second[t]);
  };
}

// The hand-traced model: the prompt is {9}.
LogitFunction traced_logits() {
  return table_logits({
      {{9}, {0.5f, 0.3f, 0.2f}},
      {{9, 1}, {0.9f, 0.05f, 0.05f}},        // after A
      {{9, 2}, {0.6f, 0.2f, 0.2f}},          // after B
      {{9, 2, 1}, {0.99f, 0.005f, 0.005f}},  // after B A
      {{9, 2, 2}, {0.99f, 0.005f, 0.005f}},  // after B B
  });
}

}  // namespace

TEST_CASE("a hand-traced W = 2 run: EOS in the length, replacement, early stopping", "[sampling]") {
  // Step 1 candidates: EOS ln .5, A ln .3, B ln .2.  [EOS] finishes with score ln .5 / 1.
  // Step 2 (beams A, B), best four: A EOS ln .3 + ln .9 = -1.309 (rank 0, finishes, score
  // -1.309 / 2 = -0.654: the EOS counts in the length), B EOS ln .2 + ln .6 = -2.120 (rank
  // 1, but its -1.060 does not beat the worst finished -0.693: dropped), B A and B B
  // (-3.219, the next beams).  Stop test: worst -0.693 >= -1.309 / 2?  No.
  // Step 3: best candidate B A EOS = -3.229; its bound -3.229 / 3 = -1.076 <= -0.693:
  // stop, after 2 model steps.  Result: [A EOS] -0.654, then [EOS] -0.693.
  const double a_eos = std::log(0.3) + std::log(0.9), eos = std::log(0.5);
  {
    ToyModel model(3, traced_logits());
    std::vector<float> root_logits;
    const int root = model.add_root({9}, root_logits);
    const BeamResult r = beam_search(model, root, root_logits, SamplingOptions::beam(2, 1.0f), 10, std::vector<int>{0}, 2);
    REQUIRE(r.hypotheses.size() == 2);
    CHECK(r.hypotheses[0].tokens == std::vector<int>{1, 0});
    CHECK(r.hypotheses[0].score == Approx(a_eos / 2));
    CHECK(r.hypotheses[1].tokens == std::vector<int>{0});
    CHECK(r.hypotheses[1].score == Approx(eos));
    CHECK(model.steps() == 2);
    CHECK(model.live().size() == 1);
  }
  {
    // max_new_tokens = 1: the live beams A (-1.204) and B (-1.609) are finalised as they
    // are; A fills the second slot, B does not beat it.
    ToyModel model(3, traced_logits());
    std::vector<float> root_logits;
    const int root = model.add_root({9}, root_logits);
    const BeamResult r = beam_search(model, root, root_logits, SamplingOptions::beam(2, 1.0f), 1, std::vector<int>{0}, 2);
    REQUIRE(r.hypotheses.size() == 2);
    CHECK(r.hypotheses[0].tokens == std::vector<int>{0});
    CHECK(r.hypotheses[1].tokens == std::vector<int>{1});
    CHECK(r.hypotheses[1].score == Approx(std::log(0.3)));
    CHECK(model.steps() == 0);
    CHECK(model.forks() == 0);
  }
  {
    // length_penalty 0 (plain sums): [EOS] -0.693 beats [A EOS] -1.309.
    ToyModel model(3, traced_logits());
    std::vector<float> root_logits;
    const int root = model.add_root({9}, root_logits);
    const BeamResult r = beam_search(model, root, root_logits, SamplingOptions::beam(2, 0.0f), 10, std::vector<int>{0}, 2);
    REQUIRE(r.hypotheses.size() == 2);
    CHECK(r.hypotheses[0].tokens == std::vector<int>{0});
    CHECK(r.hypotheses[1].tokens == std::vector<int>{1, 0});
    CHECK(r.hypotheses[1].score == Approx(a_eos));
    CHECK(model.steps() == 1);  // stops at step 2 on equality: worst -1.309 >= -1.309 / 2^0
  }
}

TEST_CASE("an EOS ranked at or below the beam width is dropped (HF)", "[sampling]") {
  // W = 2, length penalty 0 (scores are sums).  Step 1: A ln .5, B ln .499 become the beams.
  // Step 2, best four: A A -1.492, A EOS -1.743 (rank 1: finishes), B EOS -1.774 (rank 2 >=
  // W: dropped), B A -1.804 (beam).  Step 3 (uniform next tokens): A A EOS -2.590 (rank 0)
  // fills the finished set, whose worst, -2.590, equals the bound -2.590 / 3^0: stop.
  // Keeping the rank-2 B EOS instead would return [B EOS] second.
  ToyModel model(3, table_logits({
                        {{9}, {0.001f, 0.5f, 0.499f}},
                        {{9, 1}, {0.35f, 0.45f, 0.2f}},
                        {{9, 2}, {0.34f, 0.33f, 0.33f}},
                    }));
  std::vector<float> root_logits;
  const int root = model.add_root({9}, root_logits);
  const BeamResult r = beam_search(model, root, root_logits, SamplingOptions::beam(2, 0.0f), 3, std::vector<int>{0}, 2);
  REQUIRE(r.hypotheses.size() == 2);
  CHECK(r.hypotheses[0].tokens == std::vector<int>{1, 0});
  CHECK(r.hypotheses[0].score == Approx(std::log(0.5) + std::log(0.35)));
  CHECK(r.hypotheses[1].tokens == std::vector<int>{1, 1, 0});
  CHECK(r.hypotheses[1].score == Approx(std::log(0.5) + std::log(0.45) + std::log(1 / 3.0)));
  CHECK(model.steps() == 2);
  CHECK(model.live().size() == 1);
}

TEST_CASE("beam search releases every fork, also when the model throws", "[sampling]") {
  for (int fail_at = 1; fail_at <= 3; ++fail_at) {
    ToyModel model(8, random_logits(77));
    std::vector<float> root_logits;
    const int root = model.add_root({1}, root_logits);
    model.fail_at_step(fail_at);
    CHECK_THROWS_AS(beam_search(model, root, root_logits, SamplingOptions::beam(3, 1.0f), 10, std::vector<int>{7}, 1), std::runtime_error);
    CHECK(model.live().size() == 1);
    CHECK(model.live().count(root) == 1);
  }
}

TEST_CASE("beam search rejects bad arguments naming the flag", "[sampling]") {
  ToyModel model(4, random_logits(1));
  std::vector<float> root_logits;
  const int root = model.add_root({1}, root_logits);
  CHECK_THROWS_WITH(beam_search(model, root, root_logits, SamplingOptions::beam(0, 1.0f), 4, std::vector<int>{3}, 1),
                    "sampling.beam_width must be >= 1, got 0");
  CHECK_THROWS_WITH(beam_search(model, root, root_logits, SamplingOptions::beam(2, 1.0f), 0, std::vector<int>{3}, 1),
                    "--max-new-tokens must be >= 1 for beam search, got 0");
  CHECK_THROWS_WITH(beam_search(model, root, root_logits, SamplingOptions::beam(2, 1.0f), 4, std::vector<int>{3}, 3),
                    "beam search returns 1 to --beam-width = 2 hypotheses, asked for 3");
  std::vector<float> bad = root_logits;
  bad[2] = std::nanf("");
  CHECK_THROWS_WITH(beam_search(model, root, bad, SamplingOptions::beam(2, 1.0f), 4, std::vector<int>{3}, 1), "beam search: logit 2 is nan");
  CHECK(model.live().size() == 1);
}

namespace {

// Hugging Face's beam search with logits processors, written out from its source
// (BeamSearchScorer, BeamHypotheses, the processors) over whole rows, one step at a time, with
// beam_search.h's deliberate differences: one prompt beam, and no candidate of score -inf.
// `none`: no token of finite score was left before any hypothesis finished; `fewer`: a step
// carried fewer than W beams for want of finite candidates.
struct ReferenceResult {
  std::vector<BeamHypothesis> hypotheses;
  bool none = false;
  bool fewer = false;
};

// The processors on one row of log-probs after prompt + generated, in logit_controls.h's order.
void reference_processors(const LogitControls& c, const History& prompt, const History& generated,
                          const std::vector<int>& eos, std::vector<double>& scores) {
  History all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const int vocab = int(scores.size());
  // RepetitionPenaltyLogitsProcessor: score = gather(scores, input_ids); where(score < 0, score * r, score / r).
  const double r = c.repetition_penalty;
  for (int t : std::set<int>(all.begin(), all.end())) scores[t] = scores[t] < 0 ? scores[t] * r : scores[t] / r;
  // OpenAI's frequency and presence penalties over the generated tokens.
  for (int t = 0; t < vocab; ++t) {
    const long n = std::count(generated.begin(), generated.end(), t);
    if (n > 0) scores[t] -= double(c.frequency_penalty) * double(n) + double(c.presence_penalty);
  }
  // NoRepeatNGramLogitsProcessor: _get_ngrams, then ban the tokens after the last n - 1.
  const int n = c.no_repeat_ngram_size;
  if (n > 0 && int(all.size()) + 1 >= n) {
    std::map<History, std::vector<int>> ngrams;
    for (std::size_t i = 0; i + n <= all.size(); ++i)
      ngrams[History(all.begin() + i, all.begin() + i + n - 1)].push_back(all[i + n - 1]);
    for (int t : ngrams[History(all.end() - (n - 1), all.end())]) scores[t] = -INFINITY;
  }
  for (const auto& [t, bias] : c.logit_bias) scores[t] += double(bias);
  for (int t : c.banned_tokens) scores[t] = -INFINITY;
  // MinNewTokensLengthLogitsProcessor.
  if (int(generated.size()) < c.min_new_tokens)
    for (int t : eos) scores[t] = -INFINITY;
}

ReferenceResult reference_beam_search(const ToyModel& model, const History& prompt, int width, double length_penalty,
                                      int max_new, const std::vector<int>& eos, const LogitControls& c,
                                      const HypothesisEnds& ends = {}) {
  const int vocab = model.vocab_size();
  struct Beam {
    History tokens;
    double score;
  };
  // BeamHypotheses: (score, tokens, sum) in insertion order, and worst_score.
  struct Hypotheses {
    std::vector<BeamHypothesis> beams;
    double worst_score = 1e9;
  } hyps;
  const auto add = [&](const History& tokens, double sum) {
    const double score = sum / std::pow(double(tokens.size()), length_penalty);
    if (int(hyps.beams.size()) < width || score > hyps.worst_score) {
      hyps.beams.push_back({tokens, sum, score});
      if (int(hyps.beams.size()) > width) {
        std::vector<std::pair<double, int>> sorted;
        for (int i = 0; i < int(hyps.beams.size()); ++i) sorted.push_back({hyps.beams[i].score, i});
        std::sort(sorted.begin(), sorted.end());
        hyps.beams.erase(hyps.beams.begin() + sorted[0].second);
        hyps.worst_score = sorted[1].first;
      } else {
        hyps.worst_score = std::min(score, hyps.worst_score);
      }
    }
  };
  const auto is_eos = [&](int t) { return std::count(eos.begin(), eos.end(), t) > 0; };

  std::vector<Beam> beams = {{{}, 0.0}};
  std::vector<float> logits(vocab);
  ReferenceResult out;
  for (int step = 1; step <= max_new; ++step) {
    // next_token_scores = log_softmax(logits) (double); processors; + beam_scores; flattened.
    struct Flat {
      double score;
      int index;  // beam * vocab + token
    };
    std::vector<Flat> flat;
    for (int b = 0; b < int(beams.size()); ++b) {
      History history = prompt;
      history.insert(history.end(), beams[b].tokens.begin(), beams[b].tokens.end());
      model.logits(history, logits);
      std::vector<double> scores(vocab);
      for (int t = 0; t < vocab; ++t) scores[t] = log_softmax(logits, t);
      reference_processors(c, prompt, beams[b].tokens, eos, scores);
      for (int t = 0; t < vocab; ++t)
        if (scores[t] != -INFINITY) flat.push_back({beams[b].score + scores[t], b * vocab + t});
    }
    if (flat.empty()) {
      out.none = hyps.beams.empty();
      if (out.none) return out;
      break;
    }
    // topk(2W), sorted; ties to the lower flat index.
    std::sort(flat.begin(), flat.end(), [](const Flat& a, const Flat& b) {
      return a.score != b.score ? a.score > b.score : a.index < b.index;
    });
    flat.resize(std::min<std::size_t>(flat.size(), 2 * width));
    // BeamSearchScorer.process.
    std::vector<Beam> next;
    for (int rank = 0; rank < int(flat.size()); ++rank) {
      const int b = flat[rank].index / vocab, t = flat[rank].index % vocab;
      History tokens = beams[b].tokens;
      tokens.push_back(t);
      if (is_eos(t) || (ends && ends(tokens))) {
        if (rank >= width) continue;
        add(tokens, flat[rank].score);
      } else {
        next.push_back({tokens, flat[rank].score});
      }
      if (int(next.size()) == width) break;
    }
    // BeamHypotheses.is_done (early_stopping=False), cur_len = tokens generated.
    const bool done = int(hyps.beams.size()) >= width &&
                      hyps.worst_score >= flat[0].score / std::pow(double(step), length_penalty);
    if (done || next.empty()) break;
    out.fewer = out.fewer || (int(next.size()) < width && int(flat.size()) < 2 * width);
    beams = next;
    // finalize at max_length.
    if (step == max_new)
      for (const Beam& beam : beams) add(beam.tokens, beam.score);
  }
  // Sorted ascending (stable), popped from the end.
  std::vector<BeamHypothesis> sorted = hyps.beams;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.score < b.score; });
  while (!sorted.empty()) {
    out.hypotheses.push_back(sorted.back());
    sorted.pop_back();
  }
  return out;
}

LogitControls random_beam_controls(Philox& rng, int vocab) {
  LogitControls c;
  const auto on = [&] { return rng.uniform() < 0.5; };
  const auto token = [&] { return int(rng.uniform() * vocab); };
  if (on()) c.repetition_penalty = float(0.5 + rng.uniform() * 1.5);
  if (on()) c.frequency_penalty = float(rng.uniform() * 4 - 2);
  if (on()) c.presence_penalty = float(rng.uniform() * 4 - 2);
  if (on()) c.no_repeat_ngram_size = 1 + int(rng.uniform() * 3);
  if (on())
    for (int t = 0; t < vocab; ++t)
      if (rng.uniform() < 0.2) c.logit_bias.emplace_back(t, float(rng.uniform() * 6 - 3));
  // Up to most of the vocabulary banned: steps with fewer than 2W finite candidates.
  if (on())
    for (int i = int(rng.uniform() * 2 * vocab); i > 0; --i) c.banned_tokens.push_back(token());
  if (on()) c.min_new_tokens = int(rng.uniform() * 6);
  return c;
}

}  // namespace

TEST_CASE("beam search with logit controls and an ending rule equals Hugging Face's rule written out", "[sampling][beam]") {
  Philox rng(2037);
  int with_controls = 0, fewer_beams = 0, none = 0, ended_by_rule = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = 12 + int(rng.uniform() * 9), width = 2 + int(rng.uniform() * 2);
    const int max_new = 3 + int(rng.uniform() * 6);
    const float length_penalty = std::vector<float>{1.0f, 0.0f, 0.6f, 1.5f}[trial % 4];
    History prompt(1 + int(rng.uniform() * 6));
    for (int& t : prompt) t = int(rng.uniform() * vocab);
    std::vector<int> eos = {int(rng.uniform() * vocab)};
    if (rng.uniform() < 0.3) eos.push_back((eos[0] + 1) % vocab);
    const LogitControls c = random_beam_controls(rng, vocab);
    with_controls += c.active();
    // A third of the trials: hypotheses also end at the token a or the bigram (b, c), as stop
    // strings of one and of two tokens end them.
    HypothesisEnds ends;
    if (trial % 3 == 0) {
      const int a = int(rng.uniform() * vocab), b = int(rng.uniform() * vocab), c2 = int(rng.uniform() * vocab);
      ends = [a, b, c2](std::span<const int> t) {
        return t.back() == a || (t.size() >= 2 && t[t.size() - 2] == b && t.back() == c2);
      };
    }

    ToyModel model(vocab, random_logits(4000 + trial));
    const ReferenceResult want = reference_beam_search(model, prompt, width, length_penalty, max_new, eos, c, ends);
    std::vector<float> root_logits;
    const int root = model.add_root(prompt, root_logits);
    INFO("trial " << trial << ", vocab " << vocab << ", width " << width << ", max new " << max_new
                  << ", first control " << first_active_control(c));
    const SamplingOptions options = SamplingOptions::beam(width, length_penalty);
    if (want.none) {
      ++none;
      // Bans of the whole vocabulary are refused before the search; other rows of no finite
      // score end it.
      CHECK_THROWS_WITH(beam_search(model, root, root_logits, options, max_new, eos, 1, c, prompt, ends),
                        Catch::Contains("the logit controls leave no token of finite score") ||
                            Catch::Contains("bans every token of the vocabulary"));
      CHECK(model.live().size() == 1);
      continue;
    }
    const BeamResult got = beam_search(model, root, root_logits, options, max_new, eos, width, c, prompt, ends);
    fewer_beams += want.fewer;
    for (const BeamHypothesis& h : got.hypotheses)
      ended_by_rule += ends && !std::count(eos.begin(), eos.end(), h.tokens.back()) && ends(h.tokens);
    REQUIRE(got.hypotheses.size() == want.hypotheses.size());
    for (std::size_t i = 0; i < got.hypotheses.size(); ++i) {
      INFO("hypothesis " << i);
      CHECK(got.hypotheses[i].tokens == want.hypotheses[i].tokens);
      CHECK(got.hypotheses[i].sum_logprob == Approx(want.hypotheses[i].sum_logprob).epsilon(1e-12).margin(1e-12));
      CHECK(got.hypotheses[i].score == Approx(want.hypotheses[i].score).epsilon(1e-12).margin(1e-12));
      CHECK(std::isfinite(got.hypotheses[i].score));
    }
    CHECK(model.live().size() == 1);
  }
  // The draws reach every case: controls on, fewer beams than W, and no token left.
  INFO(with_controls << " trials with controls, " << fewer_beams << " carrying fewer than W beams, " << none
                     << " with no token left, " << ended_by_rule << " hypotheses ended by the rule besides EOS");
  CHECK(with_controls > 300);
  CHECK(ended_by_rule > 50);
  CHECK(fewer_beams > 5);
  CHECK(none > 5);
}

TEST_CASE("beam search with min_new_tokens: no hypothesis ends before the minimum", "[sampling][beam]") {
  // EOS (token 0) has logit 6, every other token one in [-3, 3): without the minimum the
  // best hypothesis is [EOS]; with it, since scores are sums (length penalty 0) and another
  // token costs more than 3 nats, the best ends as soon as the mask lifts.
  const int vocab = 10, eos = 0, max_new = 10;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const LogitFunction base = random_logits(700 + seed);
    ToyModel model(vocab, [&base](const History& h, std::span<float> out) {
      base(h, out);
      out[0] = 6;
    });
    std::vector<float> root_logits;
    const int root = model.add_root({3, 1}, root_logits);
    for (int min_new : {0, 1, 4, 7}) {
      LogitControls c;
      c.min_new_tokens = min_new;
      const BeamResult r = beam_search(model, root, root_logits, SamplingOptions::beam(3, 0.0f), max_new,
                                       std::vector<int>{eos}, 3, c, History{3, 1});
      INFO("seed " << seed << ", min new tokens " << min_new);
      REQUIRE(r.hypotheses.size() == 3);
      for (const BeamHypothesis& h : r.hypotheses) {
        // EOS only last, after at least min_new other tokens; without it, the limit's length.
        CHECK(std::find(h.tokens.begin(), h.tokens.end() - 1, eos) == h.tokens.end() - 1);
        if (h.tokens.back() == eos)
          CHECK(int(h.tokens.size()) >= min_new + 1);
        else
          CHECK(int(h.tokens.size()) == max_new);
      }
      CHECK(r.hypotheses[0].tokens.back() == eos);
      CHECK(int(r.hypotheses[0].tokens.size()) == min_new + 1);
    }
  }
}
