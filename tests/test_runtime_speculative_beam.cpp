// Speculative beam search on the bundled models: its n-best sequences and scores equal plain
// beam search's bitwise for every drafter (draft-1m and draft-4m chains, static and dynamic
// trees, n-grams), widths 1, 2, 4 and 8 and length penalties 0.6, 1 and 1.5; width 1 equals
// greedy speculative decoding (the same tokens and target forwards); with every logit control
// on, and with EOS favoured but masked below min_new_tokens, it still equals plain beam search;
// after every step each beam's target and draft caches equal a plain prefill of its tokens,
// and no block is leaked.
#include <catch2/catch.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "draft/model_drafter.h"
#include "runtime/decoders.h"
#include "runtime/generate.h"
#include "runtime/speculative_beam.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

using test::model_draft;

DraftOptions ngram_draft(int gamma) {
  DraftOptions d;
  d.method = DraftMethod::kNgram;
  d.gamma = gamma;
  return d;
}

GenerateOptions beam_options(const char* target, const std::vector<int>& prompt, int width, float length_penalty,
                             int max_new_tokens) {
  GenerateOptions o;
  o.model_dir = test::model_dir(target);
  o.prompt_ids = prompt;
  o.max_new_tokens = max_new_tokens;
  o.num_samples = width;  // the whole n-best list
  o.sampling.strategy = Strategy::kBeam;
  o.sampling.beam_width = width;
  o.sampling.length_penalty = length_penalty;
  o.threads = 1;
  return o;
}

}  // namespace

TEST_CASE("speculative beam search equals plain beam search bitwise for every drafter and width",
          "[runtime][beam][speculative]") {
  struct Drafting {
    const char* name;
    DraftOptions options;
  };
  const std::vector<Drafting> draftings = {
      {"draft-1m chain 3", model_draft("draft-1m", 3, {}, 0)},
      {"draft-4m static tree 3,2", model_draft("draft-4m", 4, {3, 2}, 0)},
      {"draft-1m dynamic tree 10", model_draft("draft-1m", 4, {}, 10)},
      {"ngram gamma 4", ngram_draft(4)},
  };
  struct Search {
    const char* target;
    int width;
    float length_penalty;
  };
  // Every width and length penalty on target-16m; draft-4m as a target too (draft-1m drafts for it).
  // The sanitizer build runs every other one: widths 1, 8 and 4, length penalties 1 and 0.6.
  const std::vector<Search> searches = {{"target-16m", 1, 1.0f}, {"target-16m", 2, 0.6f}, {"target-16m", 8, 1.0f},
                                        {"target-16m", 4, 1.5f}, {"target-16m", 4, 0.6f}, {"draft-4m", 4, 1.0f}};
  const std::size_t search_step = test::kSanitized ? 2 : 1;
  const auto prompts = test::reference_prompts();
  const std::size_t num_prompts = test::kSanitized ? 1 : 2;
  const int max_new = test::kSanitized ? 6 : 10;
  for (std::size_t p = 0; p < num_prompts; ++p) {
    const std::vector<int> prompt(prompts[p * 5].begin(), prompts[p * 5].begin() + 48);  // short prefills
    for (std::size_t i = 0; i < searches.size(); i += search_step) {
      const Search& s = searches[i];
      const GenerateOptions plain = beam_options(s.target, prompt, s.width, s.length_penalty, max_new);
      const auto expected = generate(test::store(), plain);
      for (const Drafting& drafting : draftings) {
        if (std::string(s.target) == "draft-4m" && drafting.options.model_dir == test::model_dir("draft-4m")) continue;
        INFO("prompt " << p << ", " << s.target << " width " << s.width << " length penalty " << s.length_penalty
                       << ", " << drafting.name);
        GenerateOptions spec = plain;
        spec.draft = drafting.options;
        const auto got = generate(test::store(), spec);
        CHECK(got["ids"] == expected["ids"]);
        CHECK(got.value("samples", nlohmann::json()) == expected.value("samples", nlohmann::json()));
        // Scores as doubles: equal JSON numbers are equal bits.
        CHECK(got["stats"]["beam"]["hypotheses"] == expected["stats"]["beam"]["hypotheses"]);
        CHECK(got["stats"]["kv"]["blocks_in_use_at_end"] == 0);
        if (drafting.options.method == DraftMethod::kModel) CHECK(got["stats"]["draft"]["kv_blocks_in_use_at_end"] == 0);
        CHECK(got["stats"]["beam"]["steps"].get<long>() ==
              got["stats"]["steps"].get<long>() + got["stats"]["accepted"].get<long>());
        CHECK(got["stats"]["target_forwards"].get<int>() <= expected["stats"]["target_forwards"].get<int>() + 1);
      }
    }
  }
}

TEST_CASE("speculative beam search equals plain beam search with every logit control on",
          "[runtime][beam][speculative]") {
  const std::span<const int> eos = test::store().get(test::model_dir("target-16m")).config().eos_token_ids;
  REQUIRE(!eos.empty());
  const auto prompts = test::reference_prompts();
  const int max_new = 8;
  long accepted = 0;  // beam steps the replays took past the first of a pass
  for (std::size_t p : test::kSanitized ? std::vector<std::size_t>{2} : std::vector<std::size_t>{2, 6}) {
    const std::vector<int> prompt(prompts[p].begin(), prompts[p].begin() + 32);
    const GenerateOptions free = beam_options("target-16m", prompt, 3, 1.0f, max_new);
    const std::vector<int> free_ids = generate(test::store(), free)["ids"].get<std::vector<int>>();
    // Every control on; the ban and the bias hit tokens the search picks without them.
    LogitControls every;
    every.repetition_penalty = 1.3f;
    every.frequency_penalty = 0.4f;
    every.presence_penalty = 0.2f;
    every.no_repeat_ngram_size = 2;
    every.logit_bias = {{free_ids[1], -2.0f}, {free_ids[2], 1.0f}};
    every.banned_tokens = {free_ids[0]};
    every.min_new_tokens = 2;
    // EOS favoured by 40 nats but masked below the minimum: every hypothesis ends in it, at or
    // after the minimum.
    LogitControls eos_min;
    eos_min.logit_bias = {{eos[0], 40.0f}};
    eos_min.min_new_tokens = 3;
    for (const bool eos_case : {false, true}) {
      const LogitControls& c = eos_case ? eos_min : every;
      GenerateOptions plain = free;
      plain.controls = c;
      const auto expected = generate(test::store(), plain);
      CHECK(expected["ids"].get<std::vector<int>>() != free_ids);
      const auto samples = expected["samples"].get<std::vector<std::vector<int>>>();
      const auto is_eos = [&](int t) { return std::find(eos.begin(), eos.end(), t) != eos.end(); };
      for (const std::vector<int>& sample : samples) {
        for (std::size_t i = 0; i < sample.size(); ++i)
          if (is_eos(sample[i])) CHECK(int(i) >= c.min_new_tokens);
        if (eos_case) CHECK(is_eos(sample.back()));
      }
      for (const DraftOptions& d :
           {model_draft("draft-1m", 3, {}, 0), model_draft("draft-1m", 3, {3, 2}, 0), ngram_draft(3)}) {
        INFO("prompt " << p << ", " << first_active_control(c) << ", " << name_of(d.method) << " tree "
                       << d.tree.size());
        GenerateOptions spec = plain;
        spec.draft = d;
        const auto got = generate(test::store(), spec);
        CHECK(got["ids"] == expected["ids"]);
        CHECK(got["samples"] == expected["samples"]);
        CHECK(got["stats"]["beam"]["hypotheses"] == expected["stats"]["beam"]["hypotheses"]);
        CHECK(got["stats"]["kv"]["blocks_in_use_at_end"] == 0);
        accepted += got["stats"]["accepted"].get<long>();
      }
    }
  }
  CHECK(accepted > 0);
}

TEST_CASE("speculative beam search of width 1 is greedy speculative decoding", "[runtime][beam][speculative]") {
  const auto prompts = test::reference_prompts();
  const std::vector<int> prompt(prompts[3].begin(), prompts[3].begin() + 40);
  for (const DraftOptions& d : {model_draft("draft-1m", 3, {}, 0), ngram_draft(3)}) {
    INFO(name_of(d.method));
    GenerateOptions beam = beam_options("target-16m", prompt, 1, 1.0f, test::kSanitized ? 8 : 16);
    beam.draft = d;
    GenerateOptions greedy = beam;
    greedy.sampling = SamplingOptions{};
    greedy.num_samples = 1;
    const auto b = generate(test::store(), beam), g = generate(test::store(), greedy);
    CHECK(b["ids"] == g["ids"]);
    // The replay of width 1 is greedy verification: the same drafts, rounds and forwards.
    CHECK(b["stats"]["target_forwards"] == g["stats"]["target_forwards"]);
    CHECK(b["stats"]["accepted"] == g["stats"]["accepted"]);
  }
}

TEST_CASE("after every speculative beam step each beam's caches equal a plain prefill of its tokens",
          "[runtime][beam][speculative]") {
  const Backend& target = test::store().get(test::model_dir("target-16m"));
  const Backend& draft = test::store().get(test::model_dir("draft-1m"));
  const auto prompts = test::reference_prompts();
  const std::vector<int> prompt(prompts[1].begin(), prompts[1].begin() + 24);
  const int block_size = GENERATE(1, 16);
  INFO("block size " << block_size);
  const int blocks = 4096 / block_size + 64;
  KvCache cache(target.model().kv_layout(block_size), blocks);
  KvCache draft_cache(draft.model().kv_layout(block_size), blocks);
  const auto workspace = target.make_workspace(), draft_workspace = draft.make_workspace();
  const ForwardContext context{target, cache, *workspace}, draft_context{draft, draft_cache, *draft_workspace};
  const auto body = std::span(prompt).first(prompt.size() - 1);
  const int seq = test::plain_prefill(target, cache, body);
  const int draft_root = test::plain_prefill(draft, draft_cache, body);
  const auto drafters = make_beam_drafters(model_draft("draft-1m", 3, {3, 2}, 0), &draft_context, draft_root);
  SamplingOptions sampling;
  sampling.strategy = Strategy::kBeam;
  sampling.beam_width = 3;
  SpeculativeStats stats;
  {
    SpeculativeBeam beam(context, seq, *drafters, sampling, test::kSanitized ? 6 : 12, target.config().eos_token_ids,
                         prompt);
    int steps = 0, partial = 0;  // partial: steps the replay stopped before the trees' depth + 1
    while (!beam.done()) {
      partial += speculative_beam_step(beam, context, stats) < 3;
      ++steps;
      for (int b = 0; b < beam.num_beams(); ++b) {
        INFO("step " << steps << " beam " << b);
        const std::vector<int>& committed = beam.committed(b);
        REQUIRE(cache.length(beam.seq(b)) == static_cast<int>(committed.size()) - 1);
        KvCache plain(target.model().kv_layout(block_size), 4096 / block_size + 8);
        const int plain_seq = test::plain_prefill(target, plain, std::span(committed).first(committed.size() - 1));
        CHECK(test::same_cache_rows(cache, beam.seq(b), plain, plain_seq, cache.length(beam.seq(b))));
        // Its drafter's cache is new after each step: it holds a prefix of the committed tokens.
        const int draft_seq = static_cast<ModelDrafter&>(beam.drafter(b)).seq();
        const int draft_len = draft_cache.length(draft_seq);
        REQUIRE(draft_len < static_cast<int>(committed.size()));
        KvCache plain_draft(draft.model().kv_layout(block_size), 4096 / block_size + 8);
        const int plain_draft_seq = test::plain_prefill(draft, plain_draft, std::span(committed).first(draft_len));
        CHECK(test::same_cache_rows(draft_cache, draft_seq, plain_draft, plain_draft_seq, draft_len));
      }
    }
    CHECK(stats.accepted > 0);  // some steps replayed several depths,
    CHECK(partial > 0);         // some stopped at a candidate the trees missed
  }
  // The search freed every sequence it held (the prompt's target sequence included); the
  // draft's prompt sequence is the caller's.
  draft_cache.free(draft_root);
  CHECK(cache.stats().blocks_in_use == 0);
  CHECK(draft_cache.stats().blocks_in_use == 0);
}

}  // namespace specula
