#include "runtime/draft_length_policy.h"

#include <algorithm>

namespace specula {

void PerSequenceLength::plan(const StepView& step, std::span<const SequenceView> sequences,
                             std::span<std::optional<DraftBound>> bounds) {
  for (std::size_t i = 0; i < sequences.size(); ++i) bounds[i] = bound(step, sequences[i]);
}

// The bonus token needs room too: at most remaining - 1 drafted levels.
std::optional<DraftBound> FixedLength::bound(const StepView& /*step*/, const SequenceView& sequence) const {
  return DraftBound{std::max(sequence.remaining_tokens - 1, 0), 0, siblings_};
}

std::optional<DraftBound> ThresholdLength::bound(const StepView& step, const SequenceView& sequence) const {
  if (max_batch_ > 0 && step.sequences > max_batch_) return std::nullopt;
  return DraftBound{std::max(sequence.remaining_tokens - 1, 0), stop_below_};
}

std::unique_ptr<DraftLengthPolicy> make_length_policy(const GenerateOptions& options) {
  switch (options.gamma_policy) {
    case GammaPolicy::kFixed: return std::make_unique<FixedLength>(options.draft.siblings);
    case GammaPolicy::kThreshold:
      return std::make_unique<ThresholdLength>(options.length_threshold.stop_below, options.length_threshold.max_batch);
    case GammaPolicy::kLoad: break;
  }
  return nullptr;
}

}  // namespace specula
