// Speculative decoding end to end on the shared models: greedy speculative output equals
// plain greedy output for every drafter; caches after any accept/reject pattern equal a
// plain run's caches bitwise; speculative sampling's first tokens follow the target's
// exact distribution under every sampler transform.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <fstream>
#include <numeric>

#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
#include "runtime/decoders.h"
#include "runtime/generate.h"
#include "runtime/speculative_sequence.h"
#include "tests/test_engine_support.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"
#include "tests/test_verify_support.h"

namespace specula {
namespace {

using test::reference_prompts;
using test::same_cache_rows;
using test::base_options;
using test::store;

// Draft-1m's proposal after `committed` (all but its last token, the root, prefilled into a
// fresh draft cache) for tree `branching`, sampled (`stochastic`) or greedy from its softmax,
// within `bound`, with Philox(21).
Proposal draft_1m_proposal(std::span<const int> committed, std::vector<int> branching, bool stochastic,
                           DraftBound bound) {
  const Backend& draft = store().get(test::model_dir("draft-1m"));
  const auto softmax = make_sampler(SamplingOptions::sample());
  const DistributionFn distribution = [&](std::span<const float> l, std::span<float> p) { softmax->distribution(l, p); };
  KvCache cache(draft.model().kv_layout(16), 16);
  const auto workspace = draft.make_workspace();
  const int seq = test::plain_prefill(draft, cache, committed.first(committed.size() - 1));
  TreeShape shape;
  shape.topology = branching_topology(branching);
  ModelDrafter drafter(ForwardContext{draft, cache, *workspace}, seq, distribution, stochastic, shape);
  Philox rng(21);
  return propose(drafter, committed, bound, rng);
}

// The planted bias a statistical test must reject: `probs` with up to `shift` of the mass moved
// from its most probable token to its second (as much as the first has).
std::vector<double> planted_shift(std::vector<double> probs, double shift) {
  std::vector<std::size_t> top(probs.size());
  std::iota(top.begin(), top.end(), 0);
  std::partial_sort(top.begin(), top.begin() + 2, top.end(),
                    [&](std::size_t a, std::size_t b) { return probs[a] > probs[b]; });
  shift = std::min(shift, probs[top[0]]);
  probs[top[0]] -= shift;
  probs[top[1]] += shift;
  return probs;
}

}  // namespace

TEST_CASE("greedy speculative output equals plain greedy output for every drafter", "[runtime][speculative]") {
  struct Drafting {
    const char* name;
    DraftOptions options;
    VerifyRule rule = VerifyRule::kToken;
  };
  using test::model_draft;
  DraftOptions ngram;
  ngram.method = DraftMethod::kNgram;
  ngram.gamma = 5;
  DraftOptions bf16_draft = model_draft("draft-1m", 2, {}, 0, false);
  bf16_draft.weights = MatrixFormat::kBF16;  // the F32 draft read as BF16: other proposals, the same output
  DraftOptions sequoia = model_draft("draft-1m", 4, {}, 10, false);
  sequoia.sequoia = {{0.55, 0.2, 0.1}, {0.5, 0.15}};  // a tree 3 wide at the root, deeper along rank 0
  DraftOptions siblings = model_draft("draft-1m", 2, {}, 0, false);
  siblings.siblings = 2;
  const std::vector<Drafting> draftings = {
      {"draft-4m chain 4", model_draft("draft-4m", 4, {}, 0, false)},
      {"draft-1m chain 1", model_draft("draft-1m", 1, {}, 0, false)},
      {"draft-1m static tree 3,2,1", model_draft("draft-1m", 4, {3, 2, 1}, 0, false)},
      {"draft-4m dynamic tree 12", model_draft("draft-4m", 4, {}, 12, false)},
      {"draft-1m adaptive chain", model_draft("draft-1m", 3, {}, 0, true)},
      {"ngram 1..3, gamma 5", ngram},
      {"draft-1m read as bf16, chain 2", bf16_draft},
      {"draft-1m chain 2, 2 siblings", siblings},
      {"draft-4m chain 4, block verification", model_draft("draft-4m", 4, {}, 0, false), VerifyRule::kBlock},
      {"draft-1m sequoia tree of 10", sequoia},
      {"draft-1m static tree 3,2,1, traversal verification", model_draft("draft-1m", 4, {3, 2, 1}, 0, false),
       VerifyRule::kTraversal},
  };
  // All 12 reference prompts and 64 tokens; the sanitizer build checks 3 prompts, 32 tokens.
  const auto prompts = reference_prompts();
  const std::size_t prompt_step = test::kSanitized ? 4 : 1;
  for (std::size_t i = 0; i < prompts.size(); i += prompt_step) {
    GenerateOptions plain = base_options(prompts[i], test::kSanitized ? 32 : 64);
    const auto expected = generate(store(), plain)["ids"];
    for (const Drafting& drafting : draftings) {
      INFO("prompt " << i << ", " << drafting.name);
      GenerateOptions spec = plain;
      spec.draft = drafting.options;
      spec.verify_rule = drafting.rule;
      const auto result = generate(store(), spec);
      CHECK(result["ids"] == expected);
      CHECK(result["stats"]["kv"]["blocks_in_use_at_end"] == 0);
      CHECK(result["stats"]["drafted"].get<long>() >= result["stats"]["accepted"].get<long>());
      if (drafting.options.siblings > 0) CHECK(result["stats"]["siblings"].get<long>() > 0);
      if (!drafting.options.tree.empty()) {  // a real tree: more nodes per round than levels (a chain)
        CHECK(result["stats"]["drafted"].get<long>() >
              static_cast<long>(drafting.options.tree.size()) * result["stats"]["steps"].get<long>());
      }
    }
  }
}

TEST_CASE("drafters sharing a draft cache run one batched call per round and propose what each proposes alone",
          "[runtime][speculative]") {
  // Three greedy chains of 3 over one draft-1m cache: a catch-up round and two feeding rounds
  // (the last level needs no forward), each one call of a row per drafter. Each drafter holds
  // its own copy of the forward context, so this also holds when the contexts are copies.
  const Backend& draft = store().get(test::model_dir("draft-1m"));
  const auto prompts = reference_prompts();
  const auto argmax_order = [](std::span<const float> l, std::span<float> p) { std::copy(l.begin(), l.end(), p.begin()); };
  TreeShape chain;
  chain.topology = chain_topology(3);
  const auto propose = [&](KvCache& cache, std::span<const std::size_t> which, std::vector<DraftCall>& calls) {
    const auto workspace = draft.make_workspace();
    std::vector<std::unique_ptr<ModelDrafter>> drafters;
    std::vector<Drafter*> pointers;
    std::vector<std::vector<int>> committed;
    Philox rng(3);
    for (std::size_t i : which) {
      committed.emplace_back(prompts[i].begin(), prompts[i].begin() + 20);
      const int seq = test::plain_prefill(draft, cache, std::span(committed.back()).first(19));
      drafters.push_back(std::make_unique<ModelDrafter>(ForwardContext{draft, cache, *workspace}, seq, argmax_order,
                                                        false, chain));
      drafters.back()->start(committed.back(), {3}, rng);
      pointers.push_back(drafters.back().get());
    }
    run_draft_forwards(pointers, &calls);
    std::vector<std::vector<int>> tokens;
    for (auto& d : drafters) tokens.push_back(d->take_proposal().tree.tokens);
    return tokens;
  };
  const std::size_t all[] = {0, 1, 2};
  KvCache shared(draft.model().kv_layout(16), 64);
  std::vector<DraftCall> calls;
  const std::vector<std::vector<int>> together = propose(shared, all, calls);
  REQUIRE(calls.size() == 3);
  for (const DraftCall& c : calls) CHECK(c.rows == 3);
  for (std::size_t i : all) {
    KvCache own(draft.model().kv_layout(16), 64);
    std::vector<DraftCall> alone_calls;
    const std::vector<std::vector<int>> alone = propose(own, std::span(&i, 1), alone_calls);
    CHECK(alone_calls.size() == 3);
    CHECK(alone.front() == together[i]);
    CHECK(together[i].size() == 3);
  }
}

TEST_CASE("after any accept/reject pattern both caches equal a plain run's caches", "[runtime][speculative]") {
  const Backend& target = store().get(test::model_dir("target-16m"));
  const Backend& draft = store().get(test::model_dir("draft-1m"));
  const std::vector<int> prompt = reference_prompts()[0];
  const int block_size = GENERATE(1, 16);
  const bool greedy = GENERATE(true, false);
  const std::vector<int> branching = GENERATE(std::vector<int>{1, 1, 1, 1}, std::vector<int>{2, 2, 1});
  INFO("block size " << block_size << (greedy ? ", greedy" : ", sampled") << ", branching " << branching.size());

  SamplingOptions sampling;
  sampling.strategy = greedy ? Strategy::kGreedy : Strategy::kSample;
  const auto sampler = make_sampler(sampling);
  KvCache cache(target.model().kv_layout(block_size), 4096 / block_size + 64);
  KvCache draft_cache(draft.model().kv_layout(block_size), 4096 / block_size + 64);
  const auto workspace = target.make_workspace(), draft_workspace = draft.make_workspace();
  const auto body = std::span(prompt).first(prompt.size() - 1);
  const int seq = test::plain_prefill(target, cache, body);
  const int draft_seq = test::plain_prefill(draft, draft_cache, body);
  TreeShape shape;
  shape.topology = branching_topology(branching);
  // As decode_speculative drafts: greedy ranks by the draft's softmax (the greedy sampler's
  // one-hot would make every tree a chain), sampling by the sampler's transform.
  const auto draft_sampler = make_sampler(greedy ? SamplingOptions::sample() : sampling);
  auto drafter = std::make_unique<ModelDrafter>(
      ForwardContext{draft, draft_cache, *draft_workspace}, draft_seq,
      [&](std::span<const float> l, std::span<float> p) { draft_sampler->distribution(l, p); }, !greedy, shape);
  ModelDrafter& model_drafter = *drafter;
  SpeculativeSequence sequence(ForwardContext{target, cache, *workspace}, seq, std::move(drafter), *sampler, prompt,
                               Philox(7), VerifyRule::kToken);
  SpeculativeStats stats;
  long rejections = 0, widest = 0;
  for (int step = 0; step < (test::kSanitized ? 5 : 12); ++step) {
    const long drafted_before = stats.drafted;
    const VerifyResult& result = sequence.step({4}, stats);
    rejections += static_cast<long>(result.accepted_nodes.size()) < stats.drafted - drafted_before;
    widest = std::max(widest, stats.drafted - drafted_before);
    const std::vector<int>& committed = sequence.committed();
    // Target: every committed token but the root is cached, exactly as a plain prefill.
    REQUIRE(cache.length(seq) == static_cast<int>(committed.size()) - 1);
    KvCache plain(target.model().kv_layout(block_size), 4096 / block_size + 8);
    const int plain_seq = test::plain_prefill(target, plain, std::span(committed).first(committed.size() - 1));
    CHECK(same_cache_rows(cache, seq, plain, plain_seq, cache.length(seq)));
    // Draft: it caches a prefix of the committed tokens (the rest it catches up on).
    const int draft_len = draft_cache.length(model_drafter.seq());
    REQUIRE(draft_len < static_cast<int>(committed.size()));
    KvCache plain_draft(draft.model().kv_layout(block_size), 4096 / block_size + 8);
    const int plain_draft_seq = test::plain_prefill(draft, plain_draft, std::span(committed).first(draft_len));
    CHECK(same_cache_rows(draft_cache, model_drafter.seq(), plain_draft, plain_draft_seq, draft_len));
  }
  CHECK(rejections > 0);  // the pattern included rejections, not only full acceptances
  // Branching 2,2,1 drafts trees (more nodes than its 3 levels), greedy or sampled.
  if (branching.front() > 1) CHECK(widest > static_cast<long>(branching.size()));
  CHECK(stats.accepted > 0);
}

// Speculative sampling keeps the target's distribution: over many independent samples the
// first emitted token follows p = transform(target logits after the prompt) exactly.
// Pearson chi-square at alpha = 1e-3 per case. Power: with N = 2000 samples a shift of 5% of
// the mass between two tokens of probability about 0.2 has noncentrality
// N * 2 * 0.05^2 / 0.2 = 50, detected with power > 0.95 at up to 10 degrees of freedom
// (critical value 29.6). Under the sanitizers N = 200 (noncentrality 5: a smoke test
// there; the toy-model tests in test_verify_lossless.cpp carry the high-power claims).
TEST_CASE("speculative sampling on the shared models: first tokens follow the target distribution",
          "[runtime][speculative][statistical]") {
  struct Case {
    const char* name;
    SamplingOptions sampling;
    DraftOptions draft;
    VerifyRule rule = VerifyRule::kToken;
  };
  auto drafting = [](std::vector<int> tree, int budget) {
    DraftOptions d;
    d.method = DraftMethod::kModel;
    d.model_dir = test::model_dir("draft-1m");
    d.gamma = 3;
    d.tree = std::move(tree);
    d.tree_budget = budget;
    return d;
  };
  DraftOptions with_siblings = drafting({}, 0);
  with_siblings.siblings = 2;
  const std::vector<Case> cases = {
      {"chain, temperature 1", SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f), drafting({}, 0)},
      {"static tree 3,2, top-k 20", SamplingOptions::sample(1.0f, 20, 1.0f, 0.0f), drafting({3, 2}, 0)},
      {"dynamic tree 8, top-p 0.9", SamplingOptions::sample(0.8f, 0, 0.9f, 0.0f), drafting({}, 8)},
      {"static tree 2,2, min-p 0.05", SamplingOptions::sample(1.2f, 0, 1.0f, 0.05f), drafting({2, 2}, 0)},
      {"chain and 2 siblings, temperature 1", SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f), with_siblings},
      {"chain, temperature 1, block verification", SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f), drafting({}, 0),
       VerifyRule::kBlock},
      {"chain, top-p 0.9, block verification", SamplingOptions::sample(0.8f, 0, 0.9f, 0.0f), drafting({}, 0),
       VerifyRule::kBlock},
      {"static tree 2,2, temperature 1, traversal verification", SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f),
       drafting({2, 2}, 0), VerifyRule::kTraversal},
      {"dynamic tree 8, top-p 0.9, traversal verification", SamplingOptions::sample(0.8f, 0, 0.9f, 0.0f),
       drafting({}, 8), VerifyRule::kTraversal},
      {"chain and 2 siblings, temperature 1, traversal verification", SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f),
       with_siblings, VerifyRule::kTraversal},
  };
  const Backend& target = store().get(test::model_dir("target-16m"));
  const int vocab = target.config().vocab_size;
  // The reference prompt whose next token is least predictable (most cells, most power).
  std::vector<int> prompt;
  double best_entropy = -1;
  for (const auto& candidate : reference_prompts()) {
    test::Engine e(target, 16, 64);
    KvCache& cache = e.cache;
    std::vector<int> positions(candidate.size());
    for (std::size_t i = 0; i < candidate.size(); ++i) positions[i] = static_cast<int>(i);
    std::vector<float> logits(static_cast<std::size_t>(vocab)), p(logits.size());
    const int seq = cache.create();
    e.forward(seq, {candidate, positions, {}, false}, logits);
    cache.free(seq);
    make_sampler(SamplingOptions::sample())->distribution(logits, p);
    double entropy = 0;
    for (float x : p) entropy -= x > 0 ? x * std::log(double(x)) : 0.0;
    if (entropy > best_entropy) best_entropy = entropy, prompt = candidate;
  }
  for (const Case& c : cases) {
    INFO(c.name);
    // Exact p of the first token.
    const auto sampler = make_sampler(c.sampling);
    test::Engine e(target, 16, 64);
    KvCache& cache = e.cache;
    std::vector<int> positions(prompt.size());
    for (std::size_t i = 0; i < prompt.size(); ++i) positions[i] = static_cast<int>(i);
    std::vector<float> logits(static_cast<std::size_t>(vocab)), p(logits.size());
    const int seq = cache.create();
    e.forward(seq, {prompt, positions, {}, false}, logits);
    cache.free(seq);
    sampler->distribution(logits, p);

    GenerateOptions o = base_options(prompt, 2);
    o.sampling = c.sampling;
    o.draft = c.draft;
    o.verify_rule = c.rule;
    o.seed = 1234;
    o.num_samples = test::kSanitized ? 200 : 2000;
    const auto result = generate(store(), o);
    std::vector<long> counts(static_cast<std::size_t>(vocab), 0);
    for (const auto& sample : result["samples"]) ++counts[sample[0].get<int>()];
    const std::vector<double> probs(p.begin(), p.end());
    const test::ChiSquare chi = test::chi_square(counts, probs);
    INFO("chi2 " << chi.statistic << " df " << chi.df << " p-value " << chi.p_value);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > 1e-3);
    CHECK(result["stats"]["accepted"].get<long>() > 0);
    CHECK(result["stats"]["draft"]["verify_rule"] == name_of(c.rule));
    if (c.draft.siblings > 0) CHECK(result["stats"]["siblings_accepted"].get<long>() > 0);
  }
}

}  // namespace specula

namespace specula {

// The confidence stop (DraftBound::stop_below): a sampled draft chain ends after the first
// token at which the product of its tokens' draft probabilities falls below the bound; every
// token drawn is proposed, the same tokens as the unbounded chain's (the same random stream);
// a bound of 0 never stops and trees ignore it.
TEST_CASE("a draft chain stops after the token where its draft probabilities' product falls below the bound",
          "[runtime][speculative]") {
  const std::vector<int> reference = reference_prompts()[3];
  const std::vector<int> committed(reference.begin(), reference.begin() + 20);
  const int vocab = store().get(test::model_dir("draft-1m")).config().vocab_size;
  const auto drafted = [&](std::vector<int> branching, DraftBound bound) {
    return draft_1m_proposal(committed, std::move(branching), /*stochastic=*/true, bound);
  };
  const int depth = 6;
  const Proposal full = drafted(std::vector<int>(depth, 1), {depth});
  REQUIRE(full.tree.size() == depth);
  CHECK(!full.stopped);
  // products[k]: the draft's probability of the chain's first k + 1 tokens.
  std::vector<double> products;
  double product = 1;
  for (int k = 0; k < depth; ++k) {
    product *= full.q[static_cast<std::size_t>(k) * vocab + static_cast<std::size_t>(full.tree.tokens[static_cast<std::size_t>(k)])];
    products.push_back(product);
  }
  int bounds_tried = 0;
  for (int k = 0; k + 1 < depth; ++k) {
    if (!(products[static_cast<std::size_t>(k) + 1] < products[static_cast<std::size_t>(k)])) continue;
    // Between the products after tokens k + 1 and k + 2: it goes on after k + 1, stops after k + 2.
    const double bound = (products[static_cast<std::size_t>(k)] + products[static_cast<std::size_t>(k) + 1]) / 2;
    const Proposal p = drafted(std::vector<int>(depth, 1), {depth, bound});
    INFO("bound " << bound << " between tokens " << k + 1 << " and " << k + 2);
    REQUIRE(p.tree.size() == k + 2);
    CHECK(p.stopped == (k + 2 < depth));
    CHECK(std::equal(p.tree.tokens.begin(), p.tree.tokens.end(), full.tree.tokens.begin()));
    ++bounds_tried;
  }
  CHECK(bounds_tried >= 2);
  // A bound of 1: one token (unless the draft is certain of it); trees grow whole.
  const Proposal one = drafted(std::vector<int>(depth, 1), {depth, 1.0});
  CHECK(one.tree.size() == (products[0] < 1 ? 1 : 2));
  CHECK(one.stopped);
  const Proposal tree = drafted({2, 1, 1}, {depth, 1.0});
  CHECK(tree.tree.size() == 6);
  CHECK(!tree.stopped);
}

// The stop reads only what the draft drew, so speculative sampling stays exact. The second
// token of a sequence, given its first token x (the target's most probable after the prompt),
// must follow p(· | prompt, x). Bounds just above and just below the draft's probability of x:
// a chain that drafts x stops after it (the second token is the bonus row's draw, or the next
// step's) or goes on (the second token is its second drafted token's verification). Pearson
// chi-square at alpha = 1e-3 over the samples whose first token is x, N = 2000 sequences on
// the reference prompt prefix (16-32 tokens) of largest p(x) times the entropy of p(· | x)
// (p(x) = 0.99, q(x) = 0.18: about 1980 samples, 50 degrees of freedom after pooling,
// critical value 86.7). Power: moving 5% of the mass between the two most probable second
// tokens (p = 0.14 and 0.08) has noncentrality 1980 · 0.05^2 (1/0.14 + 1/0.08) = 97, rejected
// with probability above 0.99; the test runs that planted distribution too and requires the
// rejection where 1000 or more samples have x first. Under the sanitizers N = 200.
TEST_CASE("speculative sampling with a confidence stop: second tokens follow the target distribution",
          "[runtime][speculative][statistical]") {
  const Backend& target = store().get(test::model_dir("target-16m"));
  const Backend& draft = store().get(test::model_dir("draft-1m"));
  const int vocab = target.config().vocab_size;
  const auto sampler = make_sampler(SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f));
  const DistributionFn distribution = [&](std::span<const float> l, std::span<float> p) { sampler->distribution(l, p); };
  const auto next = [&](const Backend& model, std::span<const int> tokens) {
    KvCache cache(model.model().kv_layout(16), 16);
    std::vector<float> logits(static_cast<std::size_t>(vocab)), p(logits.size());
    const auto workspace = model.make_workspace();
    cache.free(prefill(ForwardContext{model, cache, *workspace}, tokens, logits));
    sampler->distribution(logits, p);
    return p;
  };
  // Of the reference prompts' first 16-32 tokens, the one whose most probable next token x
  // and the spread after it give the test the most: p(x) times the entropy of p(· | x).
  std::vector<int> prompt;
  int first = -1;
  double best_score = -1;
  std::vector<float> second_p;
  for (const auto& reference : reference_prompts()) {
    for (std::size_t length = 16; length <= 32 && length < reference.size(); length += 4) {
      std::vector<int> candidate(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(length));
      const std::vector<float> p = next(target, candidate);
      const int top = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
      candidate.push_back(top);
      std::vector<float> after = next(target, candidate);
      candidate.pop_back();
      double entropy = 0;
      for (float x : after) entropy -= x > 0 ? x * std::log(double(x)) : 0.0;
      const double score = p[static_cast<std::size_t>(top)] * entropy;
      if (score > best_score) best_score = score, first = top, prompt = candidate, second_p = std::move(after);
    }
  }
  const double first_p = next(target, prompt)[static_cast<std::size_t>(first)];
  const double q_first = next(draft, prompt)[static_cast<std::size_t>(first)];
  INFO("p(x) " << first_p << ", q(x) " << q_first);

  KvCache cache(target.model().kv_layout(16), 4096), draft_cache(draft.model().kv_layout(16), 4096);
  const auto workspace = target.make_workspace(), draft_workspace = draft.make_workspace();
  const auto body = std::span(prompt).first(prompt.size() - 1);
  const int prompt_seq = test::plain_prefill(target, cache, body);
  const int draft_prompt_seq = test::plain_prefill(draft, draft_cache, body);
  TreeShape chain;
  chain.topology = chain_topology(3);
  const int samples = test::kSanitized ? 200 : 2000;
  std::vector<long> drafted;  // per bound
  for (const double bound : {q_first * 1.001, q_first * 0.999}) {
    INFO("bound " << bound << (bound > q_first ? ": stops after x" : ": goes on after x"));
    std::vector<long> counts(static_cast<std::size_t>(vocab), 0);
    long stops = 0;
    SpeculativeStats stats;
    for (int i = 0; i < samples; ++i) {
      auto drafter = std::make_unique<ModelDrafter>(ForwardContext{draft, draft_cache, *draft_workspace},
                                                    draft_cache.fork(draft_prompt_seq), distribution, true, chain);
      SpeculativeSequence sequence(ForwardContext{target, cache, *workspace}, cache.fork(prompt_seq), std::move(drafter),
                                   *sampler, prompt, Philox(2024, static_cast<uint64_t>(i)), VerifyRule::kToken);
      while (sequence.committed().size() < prompt.size() + 2) {
        sequence.step({3, bound}, stats);
        stops += sequence.last_chain().stopped;
      }
      if (sequence.committed()[prompt.size()] == first) ++counts[static_cast<std::size_t>(sequence.committed()[prompt.size() + 1])];
    }
    drafted.push_back(stats.drafted);
    const long n = std::accumulate(counts.begin(), counts.end(), 0L);
    INFO(n << " samples with first token x, " << stops << " stopped chains");
    CHECK(stops > 0);
    const std::vector<double> probs(second_p.begin(), second_p.end());
    const test::ChiSquare chi = test::chi_square(counts, probs);
    INFO("chi2 " << chi.statistic << " df " << chi.df << " p-value " << chi.p_value);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > 1e-3);
    if (n >= 1000) CHECK(test::chi_square(counts, planted_shift(probs, 0.05)).p_value < 1e-3);
  }
  CHECK(drafted[0] < drafted[1]);  // below q(x), chains that draft x go on
  cache.free(prompt_seq);
  draft_cache.free(draft_prompt_seq);
}

}  // namespace specula

namespace specula {

// Siblings (DraftBound::siblings): once a chain is complete, other candidates for its first
// token, children of the root after the chain's nodes, within max_nodes nodes in all. Sampled
// drafting draws them from the root's draft distribution without the tokens before them (the
// chain itself is the one drawn without siblings: the same random stream up to them); greedy
// drafting takes the next most probable tokens.
TEST_CASE("a draft chain's siblings are other candidates for its first token, within its node budget",
          "[runtime][speculative]") {
  const Backend& draft = store().get(test::model_dir("draft-1m"));
  const auto softmax = make_sampler(SamplingOptions::sample());
  const std::vector<int> reference = reference_prompts()[3];
  const std::vector<int> committed(reference.begin(), reference.begin() + 20);
  const int vocab = draft.config().vocab_size;
  const auto drafted = [&](bool stochastic, DraftBound bound) {
    return draft_1m_proposal(committed, std::vector<int>(6, 1), stochastic, bound);
  };
  // The draft's distribution at the root, and its tokens by descending probability.
  std::vector<float> root_q(static_cast<std::size_t>(vocab));
  {
    KvCache cache(draft.model().kv_layout(16), 16);
    const auto workspace = draft.make_workspace();
    std::vector<float> logits(root_q.size());
    cache.free(prefill(ForwardContext{draft, cache, *workspace}, committed, logits));
    softmax->distribution(logits, root_q);
  }
  std::vector<int> ranked(root_q.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) { return root_q[a] > root_q[b]; });
  REQUIRE(root_q[ranked[0]] < 0.9f);  // a bound of 1 stops the chain after its first token

  for (const bool stochastic : {true, false}) {
    INFO((stochastic ? "sampled" : "greedy"));
    const Proposal alone = drafted(stochastic, {6, 1.0});
    REQUIRE(alone.tree.size() == 1);
    const Proposal with = drafted(stochastic, {6, 1.0, 2});
    REQUIRE(with.tree.size() == 3);
    CHECK(with.siblings == 2);
    CHECK(with.stopped);
    CHECK(with.tree.tokens[0] == alone.tree.tokens[0]);
    CHECK(with.tree.children(0) == std::vector<int>{0, 1, 2});
    with.tree.validate(vocab);  // distinct root children
    if (stochastic) {
      CHECK(with.tree.draw[0] == SiblingDraw::kWithoutReplacement);
      for (int node : {1, 2})
        CHECK(root_q[static_cast<std::size_t>(with.tree.tokens[static_cast<std::size_t>(node)])] > 0);
      REQUIRE(with.q.size() == 4 * static_cast<std::size_t>(vocab));
      CHECK(std::equal(root_q.begin(), root_q.end(), with.q.begin()));
    } else {
      CHECK(with.tree.tokens == std::vector<int>{ranked[0], ranked[1], ranked[2]});
    }
    // Within max_nodes nodes: room for one sibling beside a chain of one, none beside a full
    // chain; with no node bound, every sibling asked for beside the full chain.
    const Proposal capped = drafted(stochastic, {2, 1.0, 3, 2});
    CHECK(capped.tree.size() == 2);
    CHECK(capped.siblings == 1);
    const Proposal full = drafted(stochastic, {2, 0.0, 3, 2});
    CHECK(full.tree.size() == 2);
    CHECK(full.tree.depth == std::vector<int>{1, 2});
    CHECK(full.siblings == 0);
    const Proposal unbounded = drafted(stochastic, {2, 0.0, 3});
    CHECK(unbounded.tree.depth == std::vector<int>{1, 2, 1, 1, 1});
    CHECK(unbounded.siblings == 3);
  }
}

// With siblings, speculative decoding keeps the target's output: greedy, plain greedy's
// tokens; sampled, first tokens that follow p = transform(target logits after the prompt)
// (the verifier's kWithoutReplacement rule over the chain's first token and its siblings).
// Chains stop after their first token (bound 1) and carry 2 siblings, on the reference prompt
// whose next token is least predictable (there 38% of first tokens are siblings). Pearson
// chi-square at alpha = 1e-3, N = 2000 sequences. Power: moving 0.1 of the mass between the
// two most probable tokens (probabilities p_a, p_b <= 0.5) has noncentrality
// N 0.1^2 (1/p_a + 1/p_b) >= 80 (98 here: 0.42 and 0.40, 8 degrees of freedom after pooling,
// critical value 26.1), rejected with probability above 0.99; the test runs that planted
// distribution too and requires its rejection. (Siblings declared under the wrong rule,
// kSampled, bias this prompt's first tokens too little for N = 2000; the structural test
// above checks the rule.) Under the sanitizers N = 200 and the greedy run is 8 tokens.
TEST_CASE("speculative decoding with siblings keeps the target's output: greedy tokens, sampled distribution",
          "[runtime][speculative][statistical]") {
  const Backend& target = store().get(test::model_dir("target-16m"));
  const Backend& draft = store().get(test::model_dir("draft-1m"));
  const int vocab = target.config().vocab_size;
  const auto prompts = reference_prompts();
  KvCache cache(target.model().kv_layout(16), 4096), draft_cache(draft.model().kv_layout(16), 4096);
  const auto workspace = target.make_workspace(), draft_workspace = draft.make_workspace();
  TreeShape chain;
  chain.topology = chain_topology(3);
  // A speculative sequence after `prompt`, its caches forked from the prompt's (less its last
  // token, the root) in both caches.
  struct Prefilled {
    KvCache::SeqId target = -1, draft = -1;
  };
  const auto prefilled = [&](const std::vector<int>& prompt) {
    const auto body = std::span(prompt).first(prompt.size() - 1);
    return Prefilled{test::plain_prefill(target, cache, body), test::plain_prefill(draft, draft_cache, body)};
  };
  const auto sequence = [&](const std::vector<int>& prompt, Prefilled from, const SamplingOptions& sampling,
                            const Sampler& sampler, uint64_t stream) {
    auto drafter = std::make_unique<ModelDrafter>(ForwardContext{draft, draft_cache, *draft_workspace},
                                                  draft_cache.fork(from.draft), draft_distribution(sampling, {}),
                                                  !sampler.is_greedy(), chain);
    return std::make_unique<SpeculativeSequence>(ForwardContext{target, cache, *workspace}, cache.fork(from.target),
                                                 std::move(drafter), sampler, prompt, Philox(77, stream), VerifyRule::kToken);
  };
  const auto release = [&](Prefilled from) {
    cache.free(from.target);
    draft_cache.free(from.draft);
  };

  SECTION("greedy: plain greedy's tokens") {
    const int tokens = test::kSanitized ? 8 : 32;
    const SamplingOptions greedy_options;
    const auto greedy = make_sampler(greedy_options);
    long siblings_accepted = 0;
    for (std::size_t i = 0; i < prompts.size(); i += test::kSanitized ? 6 : 2) {
      INFO("prompt " << i);
      const auto expected = generate(store(), base_options(prompts[i], tokens))["ids"].get<std::vector<int>>();
      const Prefilled from = prefilled(prompts[i]);
      auto s = sequence(prompts[i], from, greedy_options, *greedy, i);
      release(from);
      SpeculativeStats stats;
      while (static_cast<int>(s->committed().size()) < static_cast<int>(prompts[i].size()) + tokens) {
        s->step({3, 1.0, 2}, stats);
        siblings_accepted += s->last_chain().sibling_accepted;
      }
      const std::vector<int> got(s->committed().begin() + static_cast<std::ptrdiff_t>(prompts[i].size()),
                                 s->committed().begin() + static_cast<std::ptrdiff_t>(prompts[i].size()) + tokens);
      CHECK(got == expected);
    }
    CHECK(siblings_accepted > 0);
  }

  SECTION("sampled: first tokens follow the target distribution") {
    const SamplingOptions sampling = SamplingOptions::sample(1.0f, 0, 1.0f, 0.0f);
    const auto sampler = make_sampler(sampling);
    // The reference prompt whose next token is least predictable.
    std::vector<int> prompt;
    std::vector<float> p(static_cast<std::size_t>(vocab));
    double best_entropy = -1;
    for (const auto& candidate : prompts) {
      std::vector<float> logits(p.size()), candidate_p(p.size());
      cache.free(prefill(ForwardContext{target, cache, *workspace}, candidate, logits));
      sampler->distribution(logits, candidate_p);
      double entropy = 0;
      for (float x : candidate_p) entropy -= x > 0 ? x * std::log(double(x)) : 0.0;
      if (entropy > best_entropy) best_entropy = entropy, prompt = candidate, p = candidate_p;
    }
    const int samples = test::kSanitized ? 200 : 2000;
    std::vector<long> counts(static_cast<std::size_t>(vocab), 0);
    long siblings_accepted = 0;
    SpeculativeStats stats;
    const Prefilled from = prefilled(prompt);
    for (int i = 0; i < samples; ++i) {
      auto s = sequence(prompt, from, sampling, *sampler, static_cast<uint64_t>(i));
      s->step({3, 1.0, 2}, stats);
      const ChainStep step = s->last_chain();
      REQUIRE(step.drafted == 1);
      REQUIRE(step.siblings == 2);
      siblings_accepted += step.sibling_accepted;
      ++counts[static_cast<std::size_t>(s->committed()[prompt.size()])];
    }
    release(from);
    INFO(siblings_accepted << " of " << samples << " first tokens were siblings");
    CHECK(siblings_accepted > samples / 50);
    CHECK(stats.siblings == 2L * samples);
    CHECK(stats.siblings_accepted == siblings_accepted);
    CHECK(stats.drafted == 3L * samples);
    const std::vector<double> probs(p.begin(), p.end());
    const test::ChiSquare chi = test::chi_square(counts, probs);
    INFO("chi2 " << chi.statistic << " df " << chi.df << " p-value " << chi.p_value);
    CHECK(chi.impossible == 0);
    CHECK(chi.p_value > 1e-3);
    if (!test::kSanitized) CHECK(test::chi_square(counts, planted_shift(probs, 0.1)).p_value < 1e-3);
  }
  CHECK(cache.stats().blocks_in_use == 0);
}

}  // namespace specula
