// What the speculative paths (the scheduler's speculative sequences, speculative beam search)
// share: the draft distribution and the speculative fields of "stats".
#include <algorithm>
#include <memory>

#include "runtime/decoders.h"
#include "sampling/sampler.h"

namespace specula {

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
  nlohmann::json out = {
      {"draft", {{"method", name_of(d.method)}, {"model", d.model_dir}, {"gamma", d.gamma}, {"tree", d.tree},
                 {"tree_budget", d.tree_budget}, {"siblings", d.siblings}, {"adaptive", d.adaptive}, {"ngram_min", d.ngram_min},
                 {"ngram_max", d.ngram_max}, {"draft_forwards", draft_forwards}}},
      {"steps", stats.steps},
      {"drafted", stats.drafted},
      {"accepted", stats.accepted},
      {"acceptance_rate", stats.drafted ? double(stats.accepted) / double(stats.drafted) : 0.0},
      {"mean_accepted_tokens", stats.steps ? double(emitted) / double(stats.steps) : 0.0},
      {"accepted_per_depth", per_depth},
      {"siblings", stats.siblings},
      {"siblings_accepted", stats.siblings_accepted},
      {"time_breakdown", {{"draft_s", stats.draft_s}, {"verify_forward_s", stats.verify_forward_s},
                          {"sample_verify_s", stats.sample_verify_s}, {"commit_s", stats.commit_s}}},
  };
  if (!d.sequoia.empty()) out["draft"]["sequoia"] = d.sequoia;
  if (!stats.rank_tried.empty()) out["rank_counts"] = {{"tried", stats.rank_tried}, {"accepted", stats.rank_accepted}};
  return out;
}

}  // namespace specula
