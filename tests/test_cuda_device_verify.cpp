// Verification on the device (Backend::forward_verify, engine/device_verify.h):
// - [gpu] (the host execution of the CUDA sources runs these in CI): on the CUDA backend its
//   verdicts equal verify_greedy / verify_with's (the token, block and traversal rules) over
//   the sampler's p of the same rows' logits (a plain forward of the same batch on other
//   forks: bitwise equal by batch invariance), for trees of several shapes, every sibling-draw mode, every sampling transform,
//   with and without q, beside spans it does not verify (whose logits still come back while the
//   verified spans' rows stay unwritten), and the emitted tokens' log-probabilities (raw and
//   processed, with alternatives) those of token_logprob on the same rows within a bound, with
//   logit controls on some (their rows edited as the host edits them, deciding verdicts);
//   speculative sampling verified on the device follows
//   the target's law (chi-square); greedy speculation through the scheduler, verified on the
//   device (a draft model's chains drawn on its device too), emits plain greedy decoding's tokens
//   and, asked, its log-probabilities within a bound;
//   sampled steps verify on the device under every rule;
// - without a GPU: the refusals of malformed requests, the CPU backend's refusal, and
//   pack_verify's layout (greedy sequences first, runs of logit rows, where verdicts land).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/verify_plan.h"
#include "engine/forward.h"
#include "sampling/logit_controls.h"
#include "sampling/sampler.h"
#include "sampling/token_logprob.h"
#include "tests/test_gpu_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_verify_support.h"
#include "verify/verifier.h"
#include "verify/verify_rule.h"

namespace specula {
namespace {

using Catch::Contains;

// A greedy request for batch span `part`.
DeviceVerify tree_request(int part, std::span<const int> tokens, std::span<const int> parents) {
  DeviceVerify v;
  v.part = part;
  v.tokens = tokens;
  v.parents = parents;
  return v;
}

constexpr int kEos[] = {2};  // the EOS id the controls' min_new_tokens masks

// One verified sequence of the test batch: its tree, options, q, uniforms and logit controls.
struct Case {
  SamplingOptions sampling;  // strategy kGreedy: greedy
  TokenTree tree;
  std::vector<int> draw;
  std::vector<float> q;
  std::vector<double> uniforms;
  VerifyRule rule = VerifyRule::kToken;
  int logprob_top = -1;  // >= 0: the emitted tokens' log-probabilities asked
  LogprobSource logprob_source = LogprobSource::kRaw;
  LogitControls controls{};  // over the tokens before the root (the last two generated) and each context's path
  std::vector<TokenEdit> edits{};
  std::vector<int> edit_first{};
  RowControls row_controls(std::span<const int> committed) const {
    return RowControls{&controls, committed.size() - 2, kEos};
  }
  // The edits of every context after `committed` (ending in the root).
  void add_edits(std::span<const int> committed, int vocab) {
    if (!controls.active()) return;
    std::vector<int> path;
    std::vector<TokenEdit> context_edits;
    edit_first.assign(1, 0);
    for (int c = 0; c <= tree.size(); ++c) {
      tree.path_tokens(c, path);
      row_controls(committed).edits(committed, path, vocab, context_edits);
      edits.insert(edits.end(), context_edits.begin(), context_edits.end());
      edit_first.push_back(static_cast<int>(edits.size()));
    }
  }
  // Context c's row of `rows` ([n + 1, vocab]) edited as the device edits it.
  void edit_rows(std::span<const int> committed, std::span<float> rows, int vocab) const {
    std::vector<int> path;
    for (int c = 0; c <= tree.size(); ++c) {
      tree.path_tokens(c, path);
      row_controls(committed).apply(committed, path, rows.subspan(static_cast<std::size_t>(c) * vocab, vocab));
    }
  }
  DeviceVerify request(int part) const {
    DeviceVerify v = tree_request(part, tree.tokens, tree.parent);
    v.logprob_top = logprob_top;
    v.logprob_source = logprob_source == LogprobSource::kRaw ? kLogprobRaw : kLogprobProcessed;
    v.edits = edits;
    v.edit_first = edit_first;
    v.repetition_penalty = controls.repetition_penalty;
    v.frequency_penalty = controls.frequency_penalty;
    v.presence_penalty = controls.presence_penalty;
    if (sampling.strategy == Strategy::kGreedy) return v;
    v.temperature = sampling.temperature;
    v.top_k = sampling.top_k;
    v.top_p = sampling.top_p;
    v.min_p = sampling.min_p;
    v.draw = draw;
    v.q = q;
    v.uniforms = uniforms;
    v.rule = static_cast<int>(rule);
    return v;
  }
};

// A tree whose first nodes are `chain` (each the child of the previous), then `siblings` nodes
// of distinct tokens under random contexts of the chain, each context's children drawn by
// draw_of(context).
TokenTree make_tree(std::mt19937& rng, std::span<const int> chain, int siblings, int vocab,
                    const std::function<SiblingDraw(int)>& draw_of) {
  TokenTree t;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    t.tokens.push_back(chain[i]);
    t.parent.push_back(static_cast<int>(i) - 1);
    t.depth.push_back(static_cast<int>(i) + 1);
  }
  for (int k = 0; k < siblings; ++k) {
    const int parent = std::uniform_int_distribution<int>(-1, static_cast<int>(chain.size()) - 1)(rng);
    int token;
    do {
      token = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
    } while (std::find(t.tokens.begin(), t.tokens.end(), token) != t.tokens.end());
    t.tokens.push_back(token);
    t.parent.push_back(parent);
    t.depth.push_back(parent < 0 ? 1 : t.depth[static_cast<std::size_t>(parent)] + 1);
  }
  t.draw.clear();
  for (int c = 0; c <= t.size(); ++c) t.draw.push_back(draw_of(c));
  return t;
}

// q rows [n + 1, vocab]: random positive weights, each child's token given mass.
std::vector<float> make_q(std::mt19937& rng, const TokenTree& t, int vocab) {
  std::vector<float> q(static_cast<std::size_t>(t.size() + 1) * vocab);
  std::exponential_distribution<float> e(1.0f);
  for (int c = 0; c <= t.size(); ++c) {
    const std::span<float> row = std::span(q).subspan(static_cast<std::size_t>(c) * vocab, vocab);
    for (float& x : row) x = std::pow(e(rng), 4.0f);
    for (int i = 0; i < t.size(); ++i)
      if (t.parent[static_cast<std::size_t>(i)] + 1 == c) row[static_cast<std::size_t>(t.tokens[i])] += 50.0f;
    const float total = std::accumulate(row.begin(), row.end(), 0.0f);
    for (float& x : row) x /= total;
  }
  return q;
}

TEST_CASE("cuda backend: verification on the device emits what the host verifiers emit on the same logits", "[gpu]") {
  REQUIRE_GPU();
  const Model model(test::model_dir("draft-1m"));
  const auto backend = make_backend(BackendKind::kCuda, model, std::nullopt);
  const auto workspace = backend->make_workspace();
  const int vocab = model.config().vocab_size;
  KvCache cache(backend->kv_layout(16), 512);
  const ForwardContext ctx{*backend, cache, *workspace};
  const auto prompts = test::reference_prompts();
  std::mt19937 rng(7);

  // Two prompts in the cache but their last token (the root); each root's greedy chain of 3.
  struct Base {
    int seq;
    std::vector<int> prompt, chain;
  };
  std::vector<Base> bases;
  for (int b = 0; b < 2; ++b) {
    const std::vector<int>& prompt = prompts[static_cast<std::size_t>(b)];
    std::vector<int> positions(prompt.size() - 1);
    std::iota(positions.begin(), positions.end(), 0);
    const int seq = cache.create();
    ctx.run(SequenceRows{seq, std::span(prompt).first(prompt.size() - 1), positions, {}, RowLogits::kNone}, {});
    bases.push_back({seq, prompt, {}});
  }
  for (Base& b : bases) {
    const int scratch = cache.fork(b.seq);
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    int token = b.prompt.back();
    for (int d = 0; d < 3; ++d) {
      const int position = static_cast<int>(b.prompt.size()) - 1 + d;
      ctx.run(SequenceRows{scratch, std::span(&token, 1), std::span(&position, 1), {}, RowLogits::kAll}, logits);
      token = greedy_token(logits);
      b.chain.push_back(token);
    }
    cache.free(scratch);
  }

  // The verified sequences: greedy and every sampling transform, every draw mode, q or none.
  const auto all = [](SiblingDraw d) { return [d](int) { return d; }; };
  const auto mixed = [&rng](int) { return static_cast<SiblingDraw>(std::uniform_int_distribution<int>(0, 2)(rng)); };
  const std::vector<int> wrong_first{(bases[1].chain[0] + 1) % vocab, bases[1].chain[1]};
  std::vector<Case> cases;
  const auto add = [&](SamplingOptions o, std::span<const int> chain, int siblings,
                       const std::function<SiblingDraw(int)>& draw_of, bool with_q, VerifyRule rule = VerifyRule::kToken) {
    Case c{o, make_tree(rng, chain, siblings, vocab, draw_of), {}, {}, {}, rule};
    for (const SiblingDraw d : c.tree.draw) c.draw.push_back(static_cast<int>(d));
    if (with_q) c.q = make_q(rng, c.tree, vocab);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int i = 0; i < verify_uniform_count(c.tree); ++i) c.uniforms.push_back(u(rng));
    cases.push_back(std::move(c));
  };
  const std::span<const int> chain0 = bases[0].chain, chain1 = bases[1].chain;
  add(SamplingOptions{}, chain0, 2, all(SiblingDraw::kTopK), false);
  add(SamplingOptions{}, {}, 0, all(SiblingDraw::kTopK), false);
  add(SamplingOptions::sample(1.0f), chain1, 3, all(SiblingDraw::kSampled), true);
  add(SamplingOptions::sample(0.7f, 20), chain0, 3, all(SiblingDraw::kWithoutReplacement), true);
  add(SamplingOptions::sample(1.2f, 0, 0.9f), chain1, 2, all(SiblingDraw::kTopK), false);
  add(SamplingOptions::sample(1.0f, 0, 1.0f, 0.05f), chain0, 4, mixed, true);
  add(SamplingOptions::sample(0.9f, 50, 0.8f, 0.02f), {}, 0, all(SiblingDraw::kSampled), false);
  add(SamplingOptions{}, wrong_first, 1, all(SiblingDraw::kTopK), false);
  add(SamplingOptions::sample(1.5f), chain1, 0, all(SiblingDraw::kSampled), true);
  add(SamplingOptions::sample(1.0f), chain0, 0, all(SiblingDraw::kSampled), true, VerifyRule::kBlock);
  add(SamplingOptions::sample(1.2f, 0, 0.9f), chain1, 0, all(SiblingDraw::kTopK), false, VerifyRule::kBlock);
  add(SamplingOptions::sample(1.0f, 0, 1.0f, 0.05f), chain1, 4, mixed, true, VerifyRule::kTraversal);
  add(SamplingOptions::sample(0.8f, 30), chain0, 3, all(SiblingDraw::kWithoutReplacement), true, VerifyRule::kTraversal);
  // Log-probabilities of the emitted tokens: raw and processed, greedy and sampled, alternatives
  // none to the most, past a truncated support (top-k 50, top-p 0.8, min-p 0.02).
  const std::tuple<int, int, LogprobSource> logprobs[] = {{0, 5, LogprobSource::kRaw},
                                                          {7, 3, LogprobSource::kProcessed},
                                                          {2, 20, LogprobSource::kProcessed},
                                                          {3, 0, LogprobSource::kRaw},
                                                          {6, 20, LogprobSource::kProcessed},
                                                          {11, 20, LogprobSource::kRaw}};
  for (const auto& [c, top, source] : logprobs) {
    cases[static_cast<std::size_t>(c)].logprob_top = top;
    cases[static_cast<std::size_t>(c)].logprob_source = source;
  }
  // Logit controls, greedy and sampled, beside log-probabilities raw (the unedited row) and
  // processed (the edited one): a ban on the greedy chain's second token, a bias that makes a
  // wrong first token the argmax, penalties, no-repeat n-grams, a minimum length.
  const auto controls = [&](int c) -> LogitControls& { return cases[static_cast<std::size_t>(c)].controls; };
  controls(0).repetition_penalty = 1.3f;
  controls(0).banned_tokens = {chain0[1]};
  controls(3).frequency_penalty = 0.7f;
  controls(3).presence_penalty = 0.4f;
  controls(3).no_repeat_ngram_size = 2;
  controls(6).repetition_penalty = 0.8f;
  controls(6).logit_bias = {{chain1[0], 1.5f}, {chain1[1], -2.0f}, {5, 0.0f}};
  controls(6).banned_tokens = {chain1[2]};
  controls(7).logit_bias = {{wrong_first[0], 40.0f}};
  controls(7).min_new_tokens = 5;
  controls(11).presence_penalty = -0.5f;
  controls(11).repetition_penalty = 1.2f;
  controls(11).no_repeat_ngram_size = 3;

  // The batch: the verified spans with two spans beside them (a decode row, a prefill chunk).
  struct Part {
    int verified = -1;  // index into cases, or -1
    int base = 0;
  };
  std::vector<Part> layout{{0, 0}, {-1, 1}, {2, 1}, {3, 0}, {-1, 0}, {1, 0}, {4, 1},
                           {5, 0}, {6, 1}, {7, 1}, {8, 1}, {9, 0}, {10, 1}, {11, 1}, {12, 0}};
  for (const Part& part : layout)
    if (part.verified >= 0)
      cases[static_cast<std::size_t>(part.verified)].add_edits(bases[static_cast<std::size_t>(part.base)].prompt, vocab);
  // Builds the batch on fresh forks; the prefill chunk (the second unverified span) is a new sequence.
  struct Batch {
    std::vector<SequenceRows> parts;
    std::vector<TreeVerifyRows> rows;
    std::vector<int> seqs, decode_pos;
  };
  const std::vector<int>& chunk = prompts[2];
  std::vector<int> chunk_positions(chunk.size());
  std::iota(chunk_positions.begin(), chunk_positions.end(), 0);
  const auto build = [&](Batch& batch) {
    batch.rows.resize(layout.size());
    batch.decode_pos.assign(layout.size(), 0);
    int unverified = 0;
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const Base& b = bases[static_cast<std::size_t>(layout[i].base)];
      if (layout[i].verified < 0 && unverified++ == 1) {
        batch.seqs.push_back(cache.create());
        batch.parts.push_back({batch.seqs.back(), chunk, chunk_positions, {}, RowLogits::kLast});
        continue;
      }
      batch.seqs.push_back(cache.fork(b.seq));
      if (layout[i].verified < 0) {
        batch.decode_pos[i] = static_cast<int>(b.prompt.size()) - 1;
        batch.parts.push_back({batch.seqs.back(), std::span(&b.prompt.back(), 1), std::span(&batch.decode_pos[i], 1), {},
                               RowLogits::kAll});
        continue;
      }
      const TokenTree& tree = cases[static_cast<std::size_t>(layout[i].verified)].tree;
      batch.parts.push_back(batch.rows[i].build(batch.seqs.back(), b.prompt, tree));
    }
  };
  Batch host;
  build(host);
  const std::size_t rows = static_cast<std::size_t>(logit_rows(host.parts));
  std::vector<float> host_logits(rows * vocab);
  ctx.run(host.parts, host_logits);

  // One forward_verify of the layout on fresh forks, then its spans against the host's: the
  // unverified spans' logits bitwise, each verdict verify_greedy's / verify_stochastic's over the
  // same logits.
  const auto check_device_run = [&](bool count_paths) {
    Batch device;
    build(device);
    std::vector<float> device_logits(rows * vocab, 7.0f);
    std::vector<DeviceVerify> verify;
    for (std::size_t i = 0; i < layout.size(); ++i)
      if (layout[i].verified >= 0)
        verify.push_back(cases[static_cast<std::size_t>(layout[i].verified)].request(static_cast<int>(i)));
    std::vector<DeviceVerdict> verdicts(verify.size());
    const DeviceTimes times = ctx.run(device.parts, device_logits, verify, verdicts);
    CHECK(times.forward_s > 0);
    CHECK(times.sample_verify_s > 0);
    for (int seq : device.seqs) cache.free(seq);

    std::size_t row = 0, k = 0;
    int deep = 0, rejected = 0, logprob_tokens = 0;
    int edited_verdicts = 0;  // verdicts the logit controls changed
    double worst_raw = 0, worst_processed = 0;  // the largest log-probability differences
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const std::size_t n = static_cast<std::size_t>(logit_rows(std::span(&host.parts[i], 1)));
      const std::span<const float> mine = std::span(host_logits).subspan(row * vocab, n * vocab);
      const std::span<const float> theirs = std::span(device_logits).subspan(row * vocab, n * vocab);
      row += n;
      INFO("batch span " << i);
      if (layout[i].verified < 0) {
        CHECK(std::equal(mine.begin(), mine.end(), theirs.begin()));
        continue;
      }
      CHECK(std::all_of(theirs.begin(), theirs.end(), [](float x) { return x == 7.0f; }));  // left unwritten
      const Case& c = cases[static_cast<std::size_t>(layout[i].verified)];
      std::vector<float> edited(mine.begin(), mine.end());  // the rows the sampler reads
      if (c.controls.active()) c.edit_rows(bases[static_cast<std::size_t>(layout[i].base)].prompt, edited, vocab);
      const auto edited_row = [&](std::size_t context) { return std::span<const float>(edited).subspan(context * vocab, vocab); };
      const auto verdict_over = [&](std::span<const float> rows) {
        const auto row_of = [&](std::size_t context) { return rows.subspan(context * vocab, vocab); };
        if (c.sampling.strategy == Strategy::kGreedy) {
          std::vector<int> argmax;
          for (std::size_t ctx_row = 0; ctx_row < n; ++ctx_row) argmax.push_back(greedy_token(row_of(ctx_row)));
          return verify_greedy(c.tree, argmax);
        }
        const auto sampler = make_sampler(c.sampling);
        std::vector<float> p(rows.size());
        for (std::size_t ctx_row = 0; ctx_row < n; ++ctx_row)
          sampler->distribution(row_of(ctx_row), std::span(p).subspan(ctx_row * vocab, vocab));
        return verify_with(c.rule, c.tree, p, c.q, vocab, c.uniforms);
      };
      const VerifyResult want = verdict_over(edited);
      if (c.controls.active() && verdict_over(mine).tokens != want.tokens) ++edited_verdicts;
      const DeviceVerdict& got = verdicts[k++];
      CHECK(got.accepted_nodes == want.accepted_nodes);
      CHECK(got.tokens == want.tokens);
      // Each emitted token's log-probabilities against token_logprob on the host's row: raw
      // within the order of the sums, processed within the sampling kernel's bound on p;
      // alternatives the same tokens except where two lie within that bound.
      CHECK(got.logprobs.size() == (c.logprob_top >= 0 ? want.tokens.size() : 0));
      for (std::size_t e = 0; e < got.logprobs.size() && got.tokens == want.tokens; ++e) {
        const std::size_t context = e == 0 ? 0 : static_cast<std::size_t>(want.accepted_nodes[e - 1]) + 1;
        std::vector<float> row(mine.begin() + static_cast<std::ptrdiff_t>(context * vocab),
                               mine.begin() + static_cast<std::ptrdiff_t>((context + 1) * vocab));
        if (c.logprob_source == LogprobSource::kProcessed) make_sampler(c.sampling)->distribution(edited_row(context), row);
        const TokenLogprob expected = token_logprob(c.logprob_source, row, want.tokens[e], c.logprob_top);
        const double bound = c.logprob_source == LogprobSource::kRaw ? 1e-9 : 1e-6;
        const auto near = [&](double a, double b) {
          if (a == b) return true;
          double& worst = c.logprob_source == LogprobSource::kRaw ? worst_raw : worst_processed;
          worst = std::max(worst, std::abs(a - b));
          return std::abs(a - b) <= bound;
        };
        INFO("emitted token " << e);
        CHECK(near(got.logprobs[e], expected.logprob));
        REQUIRE(got.top[e].size() == expected.top.size());
        for (std::size_t j = 0; j < expected.top.size(); ++j) {
          CHECK(near(got.top[e][j].second, expected.top[j].second));
          const auto tied = [&](std::size_t a, std::size_t b) {
            return b < expected.top.size() && near(expected.top[a].second, expected.top[b].second);
          };
          CHECK((got.top[e][j].first == expected.top[j].first || tied(j, j + 1) || (j > 0 && tied(j, j - 1))));
        }
        ++logprob_tokens;
      }
      deep += want.accepted_nodes.size() >= 2 ? 1 : 0;
      rejected += static_cast<int>(want.accepted_nodes.size()) < c.tree.size() ? 1 : 0;
    }
    CHECK(logprob_tokens >= 8);
    WARN("log-probabilities of " << logprob_tokens << " emitted tokens: largest difference " << worst_raw << " raw, "
                                 << worst_processed << " processed");
    if (!count_paths) return;
    CHECK(deep >= 2);      // paths past the first node were walked
    CHECK(rejected >= 2);  // and rejections drew from residuals
    CHECK(edited_verdicts >= 2);  // the controls' edits decided verdicts
  };
  // The batch's forward is too large for a graph; its verification is captured at the second
  // run of its shape and replayed at the third, whose uniforms are new.
  const std::size_t graphs = cuda::cuda_live_graphs();
  check_device_run(true);
  CHECK(cuda::cuda_live_graphs() == graphs);
  check_device_run(false);
  CHECK(cuda::cuda_live_graphs() == graphs + 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (Case& c : cases)
    for (double& x : c.uniforms) x = u(rng);
  check_device_run(false);
  CHECK(cuda::cuda_live_graphs() == graphs + 1);
  for (int seq : host.seqs) cache.free(seq);
  for (const Base& b : bases) cache.free(b.seq);
}

// Speculative sampling verified on the device keeps the target's law: sequences forked from
// one prompt (draft-1m, T = 1) each propose one token drawn from q, the same logits at T = 2,
// and forward_verify accepts or corrects it from the device's p and the sequence's uniforms;
// the proposals drawn on the host from its q (uploaded), then drawn by a draft forward on the
// device and left there (enqueue_chains on a second cache and workspace: the verification
// gathers the tokens and q), whose drafted tokens must follow q as well. Each time,
// the first emitted token's counts against p (the CPU sampler's distribution of the same
// logits, a plain forward on the same backend) by Pearson chi-square at alpha = 1e-3. The
// prompt is the 24-token start of a reference prompt with the most effective cells exp(H(p)). A wiring error
// (p and q swapped or misaligned, q ignored, a uniform misread) moves the law towards q: the
// power against such a shift is computed here by simulation and must reach 0.9 by a total
// variation of `kDetectedShift`; the figures: docs/measurements.md, "The device path's
// chi-square test".
TEST_CASE("cuda backend: speculative sampling verified on the device follows the target's law", "[gpu][statistical]") {
  REQUIRE_GPU();
  constexpr double kAlpha = 1e-3, kDetectedShift = 0.2;
  const int batches = test::kSanitized ? 1 : 4, per_batch = test::kSanitized ? 64 : 128;
  const Model model(test::model_dir("draft-1m"));
  const auto backend = make_backend(BackendKind::kCuda, model, std::nullopt);
  const auto workspace = backend->make_workspace();
  const int vocab = model.config().vocab_size;
  KvCache cache(backend->kv_layout(16), 64 + 2 * per_batch), draft_cache(backend->kv_layout(16), 64 + 2 * per_batch);
  const ForwardContext ctx{*backend, cache, *workspace};
  const auto draft_workspace = backend->make_workspace();
  const ForwardContext draft_ctx{*backend, draft_cache, *draft_workspace};
  const auto target = make_sampler(SamplingOptions::sample(1.0f));
  const auto draft = make_sampler(SamplingOptions::sample(2.0f));

  // The prompt and its root context's p and q.
  std::vector<int> prompt;
  std::vector<float> p, q;
  double best = -1;
  std::vector<std::vector<int>> candidates = test::reference_prompts();
  candidates.resize(test::kSanitized ? 3 : candidates.size());
  for (std::vector<int> candidate : candidates) {
    candidate.resize(24);  // short prefixes: the host execution runs a row in milliseconds
    std::vector<int> positions(candidate.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> logits(static_cast<std::size_t>(vocab)), law(logits.size()), proposal(logits.size());
    const int seq = cache.create();
    ctx.run(SequenceRows{seq, candidate, positions, {}, RowLogits::kLast}, logits);
    cache.free(seq);
    target->distribution(logits, law);
    double entropy = 0;
    for (float x : law) entropy -= x > 0 ? double(x) * std::log(double(x)) : 0.0;
    if (std::exp(entropy) <= best) continue;
    best = std::exp(entropy);
    draft->distribution(logits, proposal);
    prompt = candidate, p = std::move(law), q = std::move(proposal);
  }
  std::vector<double> q_cumulative(q.size());
  std::partial_sum(q.begin(), q.end(), q_cumulative.begin(), [](double a, float b) { return a + double(b); });

  std::vector<int> prefix_positions(prompt.size() - 1);
  std::iota(prefix_positions.begin(), prefix_positions.end(), 0);
  const std::span<const int> body = std::span(prompt).first(prompt.size() - 1), last = std::span(prompt).last(1);
  const std::vector<int> last_position{static_cast<int>(prompt.size()) - 1};
  const int prefix = cache.create(), draft_prefix = draft_cache.create();
  ctx.run(SequenceRows{prefix, body, prefix_positions, {}, RowLogits::kNone}, {});
  draft_ctx.run(SequenceRows{draft_prefix, body, prefix_positions, {}, RowLogits::kNone}, {});
  const std::vector<double> law(p.begin(), p.end()), proposal(q.begin(), q.end());
  const std::vector<int> draw{kDrawSampled, kDrawSampled};
  std::vector<float> q_rows(q);
  q_rows.insert(q_rows.end(), q.begin(), q.end());  // [2, vocab]: the leaf's row is not read
  const int placeholder = 0;
  for (const bool on_device : {false, true}) {
    INFO((on_device ? "proposals drawn on the draft device and left there" : "proposals and q from the host"));
    std::vector<long> counts(static_cast<std::size_t>(vocab), 0), drafted(static_cast<std::size_t>(vocab), 0);
    long accepted = 0;
    Philox rng(41, on_device ? 1 : 0);
    for (int b = 0; b < batches; ++b) {
      std::vector<TokenTree> trees(static_cast<std::size_t>(per_batch));
      std::vector<TreeVerifyRows> rows(trees.size());
      std::vector<std::vector<double>> uniforms(trees.size());
      std::vector<double> draft_uniforms(trees.size());
      std::vector<SequenceRows> parts;
      std::vector<DeviceChain> chains;
      for (std::size_t i = 0; i < trees.size(); ++i) {
        const double u = rng.uniform();
        int token = placeholder;
        if (on_device) {
          draft_uniforms[i] = u;
          chains.push_back({SequenceRows{draft_cache.fork(draft_prefix), last, last_position, {}, RowLogits::kLast}, 1,
                            DrawOptions{2.0f, 0, 1.0f, 0.0f}, std::span(draft_uniforms).subspan(i, 1), {}, kDrawTopK});
        } else {
          token = static_cast<int>(std::upper_bound(q_cumulative.begin(), q_cumulative.end(), u * q_cumulative.back()) -
                                   q_cumulative.begin());
        }
        trees[i] = TokenTree::chain(std::span(&token, 1), SiblingDraw::kSampled);
        for (int k = 0; k < verify_uniform_count(trees[i]); ++k) uniforms[i].push_back(rng.uniform());
        parts.push_back(rows[i].build(cache.fork(prefix), prompt, trees[i]));
      }
      const EnqueuedChains left = on_device ? draft_ctx.enqueue_chains(chains) : EnqueuedChains{};
      std::vector<DeviceVerify> verify;
      for (std::size_t i = 0; i < trees.size(); ++i) {
        DeviceVerify v = tree_request(static_cast<int>(i), trees[i].tokens, trees[i].parent);
        v.temperature = 1.0f;
        v.draw = draw;
        v.uniforms = uniforms[i];
        if (on_device) {
          v.draws = left.draws.get();
          v.node_draws = left.draw_of[i];
        } else {
          v.q = q_rows;
        }
        verify.push_back(v);
      }
      std::vector<DeviceVerdict> verdicts(verify.size());
      std::vector<float> unread(static_cast<std::size_t>(logit_rows(parts)) * vocab);  // every row is verified
      ctx.run(parts, unread, verify, verdicts);
      for (std::size_t i = 0; i < verdicts.size(); ++i) {
        ++counts[static_cast<std::size_t>(verdicts[i].tokens.at(0))];
        if (on_device) ++drafted[static_cast<std::size_t>(verdicts[i].drafted.at(0))];
        accepted += static_cast<long>(verdicts[i].accepted_nodes.size());
        cache.free(parts[i].seq);
      }
      for (const DeviceChain& chain : chains) draft_cache.free(chain.first.seq);
    }
    const long samples = static_cast<long>(batches) * per_batch;
    const test::ChiSquare chi = test::chi_square(counts, law);
    INFO("prompt of " << prompt.size() << " tokens, exp(H(p)) " << best << "; " << samples << " samples, " << accepted
                      << " drafts accepted; chi2 " << chi.statistic << " df " << chi.df << " p-value " << chi.p_value);
    CHECK(accepted > samples / 10);  // the acceptance rule ran both ways
    CHECK(accepted < samples - samples / 10);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > kAlpha);
    if (on_device && !test::kSanitized) {  // the drafted tokens follow q (64 samples pool into one cell)
      const test::ChiSquare draft_chi = test::chi_square(drafted, proposal);
      INFO("drafted tokens against q: chi2 " << draft_chi.statistic << " df " << draft_chi.df << " p-value "
                                             << draft_chi.p_value);
      CHECK(draft_chi.impossible == 0);
      CHECK(draft_chi.p_value > kAlpha);
    }
    if (!test::kSanitized && !on_device) {  // the power: the same sample size, the same p and q
      const double detected = test::tv_at_power(law, proposal, samples, kAlpha, 0.9, 200, 5);
      const double at_one_percent =
          test::chi_square_power(law, test::toward(law, proposal, 0.01), samples, kAlpha, 200, 6);
      INFO("power 0.9 from a shift towards q of total variation " << detected << " (TV(p, q) "
                                                                  << test::total_variation(law, proposal)
                                                                  << "); power at 0.01: " << at_one_percent);
      CHECK(detected <= kDetectedShift);
    }
  }
  cache.free(prefix);
  draft_cache.free(draft_prefix);
}

// The greedy chains, trees and n-grams of the scheduler, with every sequence step verified on
// the device, against plain greedy decoding on the same backend: on a GPU draft-4m drafted by
// draft-1m (a chain, a static tree, a dynamic tree) and by n-grams at batch 1, 8 and 32; on the
// host execution, where a forward takes seconds, draft-1m drafting for itself in a dynamic tree
// (its siblings rejected) and by n-grams at batch 1 and 2 (n-grams at batch 2 alone under the
// sanitizers).
TEST_CASE("cuda backend: greedy speculation verified on the device emits plain greedy decoding's tokens", "[gpu]") {
  REQUIRE_GPU();
  const bool host = test::host_execution();
  const auto prompts = test::reference_prompts();
  const std::vector<int> sizes = !host                ? std::vector<int>{1, 8, 32}
                                 : test::kSanitized ? std::vector<int>{2}
                                                    : std::vector<int>{1, 2};
  const int tokens = host ? 6 : 24;
  const auto request = [&](int r) {
    GenerateOptions o = test::base_options(prompts[static_cast<std::size_t>(r) % prompts.size()], tokens);
    o.model_dir = test::model_dir(host ? "draft-1m" : "draft-4m");
    o.backend = BackendKind::kCuda;
    return o;
  };
  std::vector<std::vector<int>> plain;
  for (int r = 0; r < sizes.back(); ++r)
    plain.push_back(generate(test::store(), request(r))["ids"].get<std::vector<int>>());
  DraftOptions ngram;
  ngram.method = DraftMethod::kNgram;
  ngram.gamma = 3;
  std::vector<std::pair<const char*, DraftOptions>> drafters{{"n-gram chain of 3", ngram},
                                                             {"draft-1m chain of 3, drawn on the device", test::model_draft("draft-1m", 3, {}, 0)}};
  if (!host || !test::kSanitized)
    drafters.emplace_back("draft-1m dynamic tree of 8", test::model_draft("draft-1m", 3, {}, 8));
  if (!host) {
    drafters.emplace_back("draft-1m chain of 4", test::model_draft("draft-1m", 4, {}, 0));
    drafters.emplace_back("draft-1m static tree 2-2-1", test::model_draft("draft-1m", 3, {2, 2, 1}, 0));
  }
  for (const auto& [name, draft] : drafters) {
    for (const int size : sizes) {
      INFO(name << ", batch " << size);
      test::check_device_verified_greedy(request, draft, size, plain);
    }
  }
}

// Logit controls through the scheduler on the device path: greedy speculation with every
// control on (n-grams; draft-1m's chains, drawn on the host under them) verified on the device
// emits plain decoding's tokens under the same controls, which differ from those without them;
// so does every control but the n-grams' with draft-1m's chains and static trees drawn on its
// device, their rows edited there over the paths drawn there.
TEST_CASE("cuda backend: greedy speculation with logit controls verifies on the device", "[gpu]") {
  REQUIRE_GPU();
  const auto prompts = test::reference_prompts();
  LogitControls controls;
  controls.repetition_penalty = 1.3f;
  controls.frequency_penalty = 0.4f;
  controls.presence_penalty = 0.3f;
  controls.no_repeat_ngram_size = 2;
  controls.logit_bias = {{13, 2.0f}, {29, -1.0f}};
  controls.banned_tokens = {4};
  controls.min_new_tokens = 4;
  LogitControls without_ngrams = controls;
  without_ngrams.no_repeat_ngram_size = 0;
  DraftOptions ngram;
  ngram.method = DraftMethod::kNgram;
  ngram.gamma = 3;
  const DraftOptions chain = test::model_draft("draft-1m", 3, {}, 0), tree = test::model_draft("draft-1m", 2, {2, 2}, 0);
  struct Lane {
    const char* name;
    const LogitControls* controls;
    std::vector<std::pair<const char*, DraftOptions>> drafters;
  };
  std::vector<Lane> lanes{{"every control", &controls, {{"n-gram chain of 3", ngram}}},
                          {"all but n-grams", &without_ngrams, {{"draft-1m chain of 3", chain}}}};
  if (!test::kSanitized) {
    lanes[0].drafters.emplace_back("draft-1m chain of 3", chain);
    lanes[1].drafters.emplace_back("draft-1m tree 2, 2", tree);
  }
  const int size = 2;
  for (const Lane& lane : lanes) {
    INFO(lane.name);
    const auto request = [&](int r, bool with_controls) {
      GenerateOptions o = test::base_options(prompts[static_cast<std::size_t>(r) % prompts.size()], 6);
      o.model_dir = test::model_dir("draft-1m");
      o.backend = BackendKind::kCuda;
      if (with_controls) o.controls = *lane.controls;
      return o;
    };
    std::vector<std::vector<int>> plain;
    int changed = 0;  // requests whose tokens the controls change
    for (int r = 0; r < size; ++r) {
      plain.push_back(generate(test::store(), request(r, true))["ids"].get<std::vector<int>>());
      changed += plain.back() != generate(test::store(), request(r, false))["ids"].get<std::vector<int>>() ? 1 : 0;
    }
    CHECK(changed > 0);
    for (const auto& [name, draft] : lane.drafters) {
      INFO(name);
      const long on_device = test::check_device_verified_greedy([&](int r) { return request(r, true); }, draft, size, plain);
      if (lane.controls == &without_ngrams) CHECK(on_device > 0);  // edited on the device, drafted and verified
    }
  }
}

// Log-probabilities through the scheduler on the device path: greedy speculation (draft-1m
// drafting for itself, a chain drawn on its device and left there) verified on the device
// reports plain decoding's tokens and, raw and processed, its log-probabilities (token_logprob
// on the host over the device's logits) within the bounds of the kernel's sums and p.
TEST_CASE("cuda backend: greedy speculation verified on the device reports plain decoding's log-probabilities", "[gpu]") {
  REQUIRE_GPU();
  const std::vector<int> prompt = test::reference_prompts()[1];
  // Sanitized: raw alone (the kernel's sums).
  const std::vector<LogprobSource> sources = test::kSanitized ? std::vector{LogprobSource::kRaw}
                                                              : std::vector{LogprobSource::kRaw, LogprobSource::kProcessed};
  for (const LogprobSource source : sources) {
    INFO(name_of(source));
    std::vector<RequestOutcome> outcomes;
    std::vector<long> verified;
    for (const bool speculative : {false, true}) {
      GenerateOptions o = test::base_options(prompt, 6);
      o.model_dir = test::model_dir("draft-1m");
      o.backend = BackendKind::kCuda;
      o.logprobs = 5;
      o.logprobs_source = source;
      if (speculative) o.draft = test::model_draft("draft-1m", 3, {}, 0);
      SchedulerLimits limits;
      limits.kv_blocks = 64;
      Scheduler scheduler(test::store(), o, limits);
      scheduler.submit(o, 0);
      scheduler.run();
      outcomes.push_back(scheduler.outcome(0));
      verified.push_back(scheduler.stats().device_verified);
    }
    CHECK(verified[0] == 0);
    CHECK(verified[1] > 0);
    const std::vector<TokenLogprob>& plain = outcomes[0].logprobs.at(0);
    const std::vector<TokenLogprob>& spec = outcomes[1].logprobs.at(0);
    CHECK(outcomes[1].samples == outcomes[0].samples);
    REQUIRE(spec.size() == plain.size());
    const double bound = source == LogprobSource::kRaw ? 1e-9 : 1e-6;
    double worst = 0;  // the largest difference
    const auto near = [&](double a, double b) {
      if (a == b) return true;
      worst = std::max(worst, std::abs(a - b));
      return std::abs(a - b) <= bound;
    };
    for (std::size_t t = 0; t < plain.size(); ++t) {
      INFO("token " << t);
      CHECK(spec[t].token == plain[t].token);
      CHECK(near(spec[t].logprob, plain[t].logprob));
      REQUIRE(spec[t].top.size() == plain[t].top.size());
      for (std::size_t j = 0; j < plain[t].top.size(); ++j) {
        CHECK(spec[t].top[j].first == plain[t].top[j].first);
        CHECK(near(spec[t].top[j].second, plain[t].top[j].second));
      }
    }
    WARN(name_of(source) << " log-probabilities of " << plain.size() << " tokens: largest difference " << worst);
  }
}

// The scheduler verifies every sampled step on the device under every rule (a draft model's
// chain drawn there too).
TEST_CASE("cuda backend: sampled steps verify on the device under every verification rule", "[gpu]") {
  REQUIRE_GPU();
  const auto prompts = test::reference_prompts();
  std::vector<VerifyRule> rules{VerifyRule::kTraversal};
  if (!test::kSanitized) rules = {VerifyRule::kToken, VerifyRule::kBlock, VerifyRule::kTraversal};
  for (const VerifyRule rule : rules) {
    INFO("verify.rule " << name_of(rule));
    SchedulerLimits limits;
    limits.max_sequences = 2;
    limits.kv_blocks = 128;
    GenerateOptions o = test::base_options(prompts[0], 4);
    o.model_dir = test::model_dir("draft-1m");
    o.backend = BackendKind::kCuda;
    o.sampling = SamplingOptions::sample(1.0f);
    o.draft = test::model_draft("draft-1m", 3, {}, 0);
    o.verify_rule = rule;
    Scheduler scheduler(test::store(), o, limits);
    for (int r = 0; r < 2; ++r) {
      GenerateOptions request = o;
      request.prompt_ids = prompts[static_cast<std::size_t>(r)];
      scheduler.submit(request, static_cast<uint64_t>(r));
    }
    scheduler.run();
    long steps = 0;
    for (int r = 0; r < 2; ++r) {
      CHECK(scheduler.outcome(r).samples.front().size() == 4);
      steps += scheduler.outcome(r).spec.steps;
    }
    CHECK(steps > 0);
    CHECK(scheduler.stats().device_verified == steps);
    CHECK(scheduler.stats().device_chained == steps);
  }
}

// A batch of one tree per entry of `parents` (its parent array) over fresh sequences of `cache`,
// every row a logit row.
RaggedBatch tree_batch(KvCache& cache, const std::vector<std::vector<int>>& parents, std::vector<TreeVerifyRows>& rows) {
  std::vector<SequenceRows> parts;
  rows.resize(parents.size());
  for (std::size_t s = 0; s < parents.size(); ++s) {
    TokenTree t;
    for (std::size_t i = 0; i < parents[s].size(); ++i) {
      t.tokens.push_back(static_cast<int>(i) + 1);
      t.parent.push_back(parents[s][i]);
      t.depth.push_back(parents[s][i] < 0 ? 1 : t.depth[static_cast<std::size_t>(parents[s][i])] + 1);
    }
    const std::vector<int> committed{5, 6};
    parts.push_back(rows[s].build(cache.create(), committed, t));
  }
  return plan_batch(parts, cache.tables(), Model(test::model_dir("draft-1m")).config());
}

TEST_CASE("device verification: malformed requests are refused naming the entry and the field", "[engine]") {
  const Model model(test::model_dir("draft-1m"));
  KvCache cache(model.kv_layout(16), 64);
  std::vector<TreeVerifyRows> rows;
  const RaggedBatch batch = tree_batch(cache, {{-1, 0}, {}}, rows);
  const int vocab = model.config().vocab_size;
  const std::vector<int> tokens{1, 2}, parents{-1, 0}, draw{0, 0, 2}, bad_draw{0, 3, 2};
  const std::vector<double> uniforms{0.1, 0.2, 0.3, 0.4, 0.5}, bad_uniforms{0.1, 0.2, 1.0, 0.4, 0.5};
  const std::vector<float> q(3 * static_cast<std::size_t>(vocab), 1.0f / static_cast<float>(vocab));
  const DeviceVerify greedy = tree_request(0, tokens, parents);
  DeviceVerify sampled = greedy;
  sampled.temperature = 1;
  sampled.draw = draw;
  sampled.q = q;
  sampled.uniforms = uniforms;
  CHECK_NOTHROW(check_device_verify(batch, std::vector{greedy}, vocab));
  CHECK_NOTHROW(check_device_verify(batch, std::vector{sampled}, vocab));
  const auto refused = [&](DeviceVerify v, const std::string& what) {
    CHECK_THROWS_WITH(check_device_verify(batch, std::vector{v}, vocab), Contains("entry 0") && Contains(what));
  };
  const std::vector<int> wrong_parent{-1, 1}, wrong_token{1, vocab};
  refused(tree_request(2, tokens, parents), "part 2");
  refused(tree_request(1, tokens, parents), "has 1 rows");
  refused(tree_request(0, tokens, wrong_parent), "parent 1 of node 1");
  refused(tree_request(0, wrong_token, parents), "token 4096 of node 1");
  DeviceVerify v = sampled;
  v.top_p = 0;
  refused(v, "top_p 0");
  v = sampled;
  v.temperature = -1;
  refused(v, "temperature -1");
  v = sampled;
  v.draw = bad_draw;
  refused(v, "draw code 3 of context 1");
  v = sampled;
  v.uniforms = bad_uniforms;
  refused(v, "uniform 1");
  v = sampled;
  v.q = {};
  refused(v, "context 0 has children drawn from q");
  v = sampled;
  v.rule = kRuleBlock;
  CHECK_NOTHROW(check_device_verify(batch, std::vector{v}, vocab));
  const std::vector<int> branching{-1, -1};
  v.parents = branching;
  refused(v, "block verification takes a chain; node 1 has parent -1");
  v.rule = kRuleTraversal;
  CHECK_NOTHROW(check_device_verify(batch, std::vector{v}, vocab));
  v.rule = 3;
  refused(v, "rule code 3 is not 0, 1 or 2");
  v = greedy;
  v.rule = kRuleBlock;
  refused(v, "rule 1 verifies sampled trees");
  v = greedy;
  v.logprob_top = 21;
  refused(v, "logprob_top 21 is outside [-1, 20]");
  v.logprob_top = 2;
  v.logprob_source = 2;
  refused(v, "logprob source code 2 is not 0 or 1");
  v.logprob_source = kLogprobProcessed;
  CHECK_NOTHROW(check_device_verify(batch, std::vector{v}, vocab));
  CHECK_THROWS_WITH(check_device_verify(batch, std::vector{greedy, greedy}, vocab),
                    Contains("entry 1") && Contains("verified twice"));

  // Logit edits: each context's own, ascending, in the vocabulary; finite numbers.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<TokenEdit> edits{{5, 1}, {9, 0, true}, {7}}, outside{{5}, {9}, {vocab}}, negative{{5}, {9}, {7, -1}},
      infinite_bias{{5}, {9}, {7, 0, false, false, true, inf}};
  const std::vector<int> edit_first{0, 2, 3, 3}, short_first{0, 2, 3}, from_one{1, 2, 3, 3}, unsorted_first{0, 3, 3, 3};
  const auto edited = [&](std::span<const TokenEdit> e, std::span<const int> first) {
    DeviceVerify out = greedy;
    out.edits = e;
    out.edit_first = first;
    return out;
  };
  CHECK_NOTHROW(check_device_verify(batch, std::vector{edited(edits, edit_first)}, vocab));
  v = edited(edits, edit_first);
  v.frequency_penalty = std::numeric_limits<float>::quiet_NaN();
  refused(v, "penalty nan is not finite");
  refused(edited(edits, {}), "3 edits given without edit_first");
  refused(edited(edits, short_first), "edit_first has 3 entries; need 4");
  refused(edited(edits, from_one), "edit_first runs from 1 to 3, not from 0 to the 3 edits");
  refused(edited(edits, unsorted_first), "edit 2 of context 0: token 7 is not above the previous edit's");
  refused(edited(outside, edit_first), "edit 2 of context 1: token 4096 is outside [0, 4096)");
  refused(edited(negative, edit_first), "edit 2 of context 1: count -1 is negative");
  refused(edited(infinite_bias, edit_first), "edit 2 of context 1: bias inf is not finite");
  // Path edits: only over draws left on a device (a tree on the host takes its own lists).
  PathEdits path_edits;
  v = tree_request(0, tokens, parents);
  v.path_edits = &path_edits;
  refused(v, "path edits take draws of a chain or static tree and no host edits");

  // Trees of device draws: q theirs; dynamic trees' draws whole, in order, planned as a chain.
  struct Draws : DeviceDraws {
    int count = 4, budget = 0;
    bool q = false;
    int draws() const override { return count; }
    bool keeps_q() const override { return q; }
    int tree_budget() const override { return budget; }
    std::vector<double> round_seconds() const override { return {}; }
  } draws;
  const std::vector<int> last_two{2, 3}, odd{1, 2}, repeated{2, 2}, top_k_draw{2, 2, 2};
  v = sampled;
  v.draws = &draws;
  v.node_draws = last_two;
  refused(v, "a tree of draws takes q from its draws, not from q");
  v.q = {};
  refused(v, "context 0 has children drawn from q, and the draws keep none");
  draws.q = true;
  CHECK_NOTHROW(check_device_verify(batch, std::vector{v}, vocab));
  draws.q = false;
  draws.budget = 2;
  refused(v, "context 0 of a dynamic tree has draw code 0; its children are the top-k (2)");
  v.draw = top_k_draw;
  CHECK_NOTHROW(check_device_verify(batch, std::vector{v}, vocab));
  v.node_draws = odd;
  refused(v, "a dynamic tree's 2 nodes are not the whole tree of draws from 1 of budget 2");
  v.node_draws = repeated;
  refused(v, "node 1 of a dynamic tree is draw 2, not 3");
  v.node_draws = last_two;
  v.parents = branching;
  refused(v, "node 1 of a dynamic tree has placeholder parent -1, not the chain's 0");
  v.parents = parents;
  v.rule = kRuleBlock;
  refused(v, "a dynamic tree of draws is none");
  draws.budget = 3;
  refused(v, "a dynamic tree's 2 nodes are not the whole tree of draws from 2 of budget 3");
  draws.budget = 0;
  v = edited(edits, edit_first);
  v.draws = &draws;
  v.node_draws = last_two;
  refused(v, "logit edits take the tree's tokens; a tree of draws has none on the host");

  // The CPU backend verifies on the host (runtime/): it refuses forward_verify by name.
  const auto cpu = make_backend(BackendKind::kCpu, model, std::nullopt);
  CHECK_FALSE(cpu->verifies_on_device());
  const auto workspace = cpu->make_workspace();
  std::vector<float> logits(3 * static_cast<std::size_t>(vocab));
  std::vector<DeviceVerdict> verdicts(1);
  CHECK_THROWS_WITH(cpu->forward_verify(batch, KvPlan{}, cache.storage(), *workspace, logits, {}, std::vector{greedy},
                                        verdicts),
                    Contains("backend 'cpu'") && Contains("not implemented"));
}

TEST_CASE("device verification: pack_verify puts greedy sequences first and runs logit rows together", "[engine]") {
  const Model model(test::model_dir("draft-1m"));
  KvCache cache(model.kv_layout(16), 64);
  std::vector<TreeVerifyRows> rows;
  // Spans: 0 stochastic (2 nodes), 1 unverified (1 node), 2 greedy (1 node), 3 greedy (0 nodes).
  const RaggedBatch batch = tree_batch(cache, {{-1, 0}, {-1}, {-1}, {}}, rows);
  const int vocab = model.config().vocab_size;
  const std::vector<int> two{1, 2}, two_parents{-1, 0}, one{3}, one_parent{-1}, draw{2, 2, 2};
  const std::vector<double> uniforms{0.1, 0.2, 0.3, 0.4, 0.5};
  DeviceVerify sampled = tree_request(0, two, two_parents);
  sampled.temperature = 0.5f;
  sampled.top_k = 3;
  sampled.draw = draw;
  sampled.uniforms = uniforms;
  sampled.rule = kRuleBlock;
  const std::vector<DeviceVerify> verify{sampled, tree_request(2, one, one_parent),
                                         tree_request(3, {}, {})};
  const cuda::VerifyUpload up = cuda::pack_verify(batch, verify, vocab);
  CHECK(up.greedy == 2);
  CHECK(up.stochastic == 1);
  CHECK(up.greedy_nodes == 1);
  CHECK(up.nodes == 3);
  CHECK(up.greedy_contexts == 3);
  CHECK(up.contexts == 6);
  CHECK(up.sequence == std::vector<int>{2, 0, 1});
  CHECK(up.first_node == std::vector<int>{1, 0, 1});
  CHECK(up.first_context == std::vector<int>{3, 0, 2});
  // Logit rows 0-2 (span 0) -> contexts 3-5; 3-4 (span 1) to the host; 5-6 (span 2) -> 0-1; 7 (span 3) -> 2.
  const auto run = [](const cuda::VerifyUpload::Run& r) { return std::vector<int>{r.logit_row, r.context, r.rows}; };
  std::vector<std::vector<int>> sample_runs, host_runs;
  for (const auto& r : up.sample_runs) sample_runs.push_back(run(r));
  for (const auto& r : up.host_runs) host_runs.push_back(run(r));
  CHECK(sample_runs == std::vector<std::vector<int>>{{0, 3, 3}, {5, 0, 3}});
  CHECK(host_runs == std::vector<std::vector<int>>{{3, 0, 2}});
  // The upload: each context's options, greedy contexts at temperature 0.
  const auto floats = [&](std::size_t at, int i) {
    float x;
    std::memcpy(&x, up.data.data() + at + static_cast<std::size_t>(i) * sizeof(float), sizeof(float));
    return x;
  };
  CHECK(floats(up.at.temperature, 0) == 0.0f);
  CHECK(floats(up.at.temperature, 3) == 0.5f);
  int rule = 0;  // the stochastic sequence's rule
  std::memcpy(&rule, up.data.data() + up.at.rule, sizeof(int));
  CHECK(rule == kRuleBlock);
  CHECK(up.at.result + up.result_ints() * sizeof(int) <= up.device_bytes);
  // Its shape: the same for other tokens, options, uniforms and rule, not for another tree or order.
  const std::vector<int> other_two{7, 8}, other_one{9};
  const std::vector<double> other_uniforms{0.9, 0.8, 0.7, 0.6, 0.5};
  DeviceVerify resampled = tree_request(0, other_two, two_parents);
  resampled.temperature = 1.5f;
  resampled.draw = draw;
  resampled.uniforms = other_uniforms;
  CHECK(cuda::pack_verify(batch, std::vector<DeviceVerify>{resampled, tree_request(2, other_one, one_parent),
                                                           tree_request(3, {}, {})},
                          vocab)
            .shape() == up.shape());
  CHECK(cuda::pack_verify(batch, std::vector<DeviceVerify>{sampled, tree_request(2, one, one_parent)}, vocab).shape() !=
        up.shape());
  DeviceVerify greedy_first = sampled;
  greedy_first.temperature = 0;
  greedy_first.rule = kRuleToken;
  CHECK(cuda::pack_verify(batch, std::vector<DeviceVerify>{greedy_first, tree_request(2, one, one_parent),
                                                           tree_request(3, {}, {})},
                          vocab)
            .shape() != up.shape());
  // Logit edits: their count stays out of the shape (what the edit rows read lies after it).
  const std::vector<TokenEdit> few{TokenEdit{3}}, more{TokenEdit{3}, TokenEdit{5}};
  const std::vector<int> first_few{0, 1, 1}, first_more{0, 2, 2};
  DeviceVerify edited_few = tree_request(2, one, one_parent), edited_more = edited_few;
  edited_few.edits = few;
  edited_few.edit_first = first_few;
  edited_more.edits = more;
  edited_more.edit_first = first_more;
  const auto shape_with = [&](const DeviceVerify& e) {
    return cuda::pack_verify(batch, std::vector<DeviceVerify>{sampled, e, tree_request(3, {}, {})}, vocab).shape();
  };
  CHECK(shape_with(edited_few) == shape_with(edited_more));
  CHECK(shape_with(edited_few) != up.shape());

  // Verdicts land at each sequence's first node and context; a refused context is named.
  std::vector<int> result(up.result_ints(), 0);
  const std::size_t counts = static_cast<std::size_t>(up.contexts), nodes = counts + 3, emitted = nodes + 3;
  result[counts + 2] = 2;  // the stochastic sequence accepted both nodes
  result[nodes + 1] = 0, result[nodes + 2] = 1;
  result[emitted + 3] = 1, result[emitted + 4] = 2, result[emitted + 5] = 9;
  result[counts + 0] = 1;  // the first greedy one accepted its node
  result[nodes + 0] = 0;
  result[emitted + 0] = 3, result[emitted + 1] = 8;
  result[emitted + 2] = 4;  // the empty tree's bonus
  const std::vector<DeviceVerdict> v = cuda::unpack_verdicts(up, verify, result);
  CHECK(v[0].accepted_nodes == std::vector<int>{0, 1});
  CHECK(v[0].tokens == std::vector<int>{1, 2, 9});
  CHECK(v[1].accepted_nodes == std::vector<int>{0});
  CHECK(v[1].tokens == std::vector<int>{3, 8});
  CHECK(v[2].accepted_nodes.empty());
  CHECK(v[2].tokens == std::vector<int>{4});
  result[4] = -1;  // context 1 of the stochastic sequence (span 0)
  CHECK_THROWS_WITH(cuda::unpack_verdicts(up, verify, result), Contains("batch span 0, context 1") && Contains("refuses"));
}

}  // namespace
}  // namespace specula

