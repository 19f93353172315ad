// The speculative decoding loop: prefill target and draft with the prompt but its last
// token (the first step's root), then every sample a SpeculativeSequence forked from the
// shared prefill, all stepping together (speculative_step: batched draft forwards, one
// target forward) until each is complete.
#include <algorithm>
#include <chrono>

#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
#include "base/error.h"
#include "runtime/decoders.h"
#include "runtime/speculative_sequence.h"

namespace specula {

TreeShape tree_shape(const DraftOptions& d) {
  TreeShape shape;
  shape.adaptive = d.adaptive;
  if (d.tree_budget > 0) {
    shape.dynamic_budget = d.tree_budget;
  } else if (!d.tree.empty()) {
    shape.branching = d.tree;
  } else {
    shape.branching.assign(static_cast<std::size_t>(d.gamma), 1);
  }
  return shape;
}

DistributionFn draft_distribution(const SamplingOptions& sampling, const DraftOptions&) {
  // Deterministic drafting (greedy, beam) ranks by the draft's own softmax (the top-k draw
  // keeps tokens of q > 0, which raw logits <= 0 are not); sampled drafting draws from the
  // sampler's transform, the one applied to the target too (lossless verification needs it).
  const bool deterministic = sampling.strategy != Strategy::kSample;
  std::shared_ptr<const Sampler> sampler = make_sampler(deterministic ? SamplingOptions::sample() : sampling);
  return [sampler](std::span<const float> logits, std::span<float> probs) { sampler->distribution(logits, probs); };
}

nlohmann::json speculative_stats_json(const DraftOptions& d, const SpeculativeStats& stats, long emitted,
                                      long draft_forwards) {
  std::vector<double> per_depth;
  for (long count : stats.accepted_at_depth) per_depth.push_back(double(count) / double(stats.steps));
  return {
      {"draft", {{"method", name_of(d.method)}, {"model", d.model_dir}, {"gamma", d.gamma}, {"tree", d.tree},
                 {"tree_budget", d.tree_budget}, {"adaptive", d.adaptive}, {"ngram_min", d.ngram_min},
                 {"ngram_max", d.ngram_max}, {"draft_forwards", draft_forwards}}},
      {"steps", stats.steps},
      {"drafted", stats.drafted},
      {"accepted", stats.accepted},
      {"acceptance_rate", stats.drafted ? double(stats.accepted) / double(stats.drafted) : 0.0},
      {"mean_accepted_tokens", stats.steps ? double(emitted) / double(stats.steps) : 0.0},
      {"accepted_per_depth", per_depth},
      {"time_breakdown", {{"draft_s", stats.draft_s}, {"verify_forward_s", stats.verify_forward_s},
                          {"sample_verify_s", stats.sample_verify_s}, {"commit_s", stats.commit_s}}},
  };
}

DecodeRun decode_speculative(ModelStore& models, const Backend& target, const GenerateOptions& options,
                             const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const DraftOptions& d = options.draft;
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const int num_samples = options.num_samples;
  const auto sampler = make_sampler(options.sampling);
  const bool greedy = sampler->is_greedy();

  const Backend* draft = d.method == DraftMethod::kModel ? &draft_model(models, d) : nullptr;
  const int bs = options.kv_block_size;
  const int blocks = static_cast<int>(request_kv_blocks(options));
  KvCache cache(target.kv_layout(bs), blocks);
  const auto workspace = target.make_workspace();
  const ForwardContext target_context{target, cache, *workspace};
  std::unique_ptr<KvCache> draft_cache;
  std::unique_ptr<Workspace> draft_workspace;
  std::unique_ptr<ForwardContext> draft_context;
  if (draft) {
    draft_cache = std::make_unique<KvCache>(draft->kv_layout(bs), blocks);
    draft_workspace = draft->make_workspace();
    draft_context = std::make_unique<ForwardContext>(ForwardContext{*draft, *draft_cache, *draft_workspace});
  }

  const DistributionFn distribution = draft_distribution(options.sampling, d);

  DecodeRun run;
  const auto start = Clock::now();
  const auto body = std::span(options.prompt_ids).first(static_cast<std::size_t>(prompt_len - 1));  // the root is fed by step 1
  std::vector<float> unused;
  const KvCache::SeqId root_seq = prefill(target_context, body, unused);
  const KvCache::SeqId draft_root_seq = draft ? prefill(*draft_context, body, unused) : -1;
  if (!body.empty()) {
    ++run.target_forwards;
    run.target_forwards_rows += static_cast<int>(body.size());
  }
  const auto decode_start = Clock::now();
  run.prefill_s = std::chrono::duration<double>(decode_start - start).count();

  // Every sample a sequence forked from the shared prefill, with its own Philox stream; a
  // wave of them steps together, one batched step per round.
  SpeculativeStats stats;
  long draft_forwards = 0;
  run.samples.resize(static_cast<std::size_t>(num_samples));
  std::vector<SpeculativeSequence*> stepping;
  std::vector<int> max_depths;
  for (int first = 0; first < num_samples; first += kSampleWave) {
    struct Sample {
      int index;
      std::unique_ptr<SpeculativeSequence> sequence;
      ModelDrafter* model_drafter;
    };
    std::vector<Sample> live;
    for (int s = first; s < std::min(num_samples, first + kSampleWave); ++s) {
      std::unique_ptr<Drafter> drafter;
      ModelDrafter* model_drafter = nullptr;
      if (draft) {
        auto md = std::make_unique<ModelDrafter>(*draft_context, draft_cache->fork(draft_root_seq), distribution,
                                                 !greedy, tree_shape(d));
        model_drafter = md.get();
        drafter = std::move(md);
      } else {
        drafter = std::make_unique<NgramDrafter>(NgramConfig{d.ngram_min, d.ngram_max, d.gamma});
      }
      live.push_back({s,
                      std::make_unique<SpeculativeSequence>(target_context, cache.fork(root_seq), std::move(drafter),
                                                            *sampler, options.prompt_ids,
                                                            Philox(options.seed, static_cast<uint64_t>(s))),
                      model_drafter});
    }
    while (!live.empty()) {
      stepping.clear();
      max_depths.clear();
      for (const Sample& sample : live) {
        stepping.push_back(sample.sequence.get());
        // The bonus token needs room too: at most remaining - 1 drafted levels.
        max_depths.push_back(options.max_new_tokens -
                             static_cast<int>(run.samples[static_cast<std::size_t>(sample.index)].size()) - 1);
      }
      const std::vector<const VerifyResult*> results = speculative_step(stepping, max_depths, target_context, stats);
      std::vector<Sample> still_live;
      for (std::size_t i = 0; i < live.size(); ++i) {
        Sample& sample = live[i];
        bool done = false;
        for (int token : results[i]->tokens)
          if ((done = emit_token(run.samples[static_cast<std::size_t>(sample.index)], token, options,
                                 target.config().eos_token_ids, sample.index, sink)))
            break;
        if (!done) {
          still_live.push_back(std::move(sample));
          continue;
        }
        if (sample.model_drafter) draft_forwards += sample.model_drafter->draft_forwards();
        sample.sequence.reset();  // frees its target and draft sequences
      }
      live = std::move(still_live);
    }
  }
  cache.free(root_seq);
  if (draft) draft_cache->free(draft_root_seq);
  run.target_forwards += static_cast<int>(stats.target_forwards);
  run.target_forwards_rows += static_cast<int>(stats.target_rows);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.kv = cache.stats();

  long emitted = 0;
  for (const auto& ids : run.samples) emitted += static_cast<long>(ids.size());
  run.extra = speculative_stats_json(d, stats, emitted, draft_forwards);
  if (draft_cache) run.extra["draft"]["kv_blocks_in_use_at_end"] = draft_cache->stats().blocks_in_use;
  return run;
}

}  // namespace specula
