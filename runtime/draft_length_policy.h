// defines: DraftLengthPolicy, how far each speculative sequence may draft in a step (its
// DraftBound: depth, confidence stop, siblings; or none: a plain step), planned before the
// step's draft rounds; and the two simple policies: FixedLength (the drafter's own length,
// draft.gamma_policy = "fixed") and ThresholdLength (a confidence stop on the chain's draft
// probability and a batch-size cut-off, draft.gamma_policy = "threshold": the baseline any
// smarter policy must beat). The cost model (draft.gamma_policy = "load",
// runtime/draft_length.h) plans the whole step at once in the scheduler.
//
// Usage (runtime/scheduler.cpp):
//   std::unique_ptr<DraftLengthPolicy> policy = make_length_policy(options);
//   for (Sequence* s : step_sequences) {
//     const std::optional<DraftBound> bound =
//         policy->plan(StepView{step_sequences.size()}, SequenceView{remaining_tokens(*s)});
//     if (!bound) s->spec->start_plain();  // the root row alone, no draft forward
//     else drafting.push_back({s->spec.get(), *bound});
//   }
//   run_drafts(...); one target forward; verify; commit.
// A policy reads only what the step is about to do and never a verification uniform, so the
// output law and greedy output stay what the verifier makes them.
#pragma once

#include <memory>
#include <optional>

#include "draft/drafter.h"
#include "runtime/generate_options.h"

namespace specula {

struct StepView {
  int sequences = 0;  // sequences with rows in this step (the batch)
};

struct SequenceView {
  int remaining_tokens = 0;  // tokens its request may still emit (the bonus token included)
};

class DraftLengthPolicy {
 public:
  virtual ~DraftLengthPolicy() = default;
  // The sequence's bound this step, or nullopt for a plain step.
  virtual std::optional<DraftBound> plan(const StepView& step, const SequenceView& sequence) const = 0;
};

// The drafter's own length (draft.gamma, a tree's depth, the adaptive chain's), within the
// tokens left, with draft.siblings beside a chain's first token.
class FixedLength final : public DraftLengthPolicy {
 public:
  explicit FixedLength(int siblings) : siblings_(siblings) {}
  std::optional<DraftBound> plan(const StepView& step, const SequenceView& sequence) const override;

 private:
  int siblings_;
};

// A plain step once more than max_batch sequences share the step (0: no cut-off); otherwise
// the drafter's length with the chain ending after the token at which the product of its
// draft probabilities falls below stop_below (draft models; n-grams propose without it).
class ThresholdLength final : public DraftLengthPolicy {
 public:
  ThresholdLength(double stop_below, int max_batch) : stop_below_(stop_below), max_batch_(max_batch) {}
  std::optional<DraftBound> plan(const StepView& step, const SequenceView& sequence) const override;

 private:
  double stop_below_;
  int max_batch_;
};

// FixedLength or ThresholdLength from options.gamma_policy (nullptr for "load").
std::unique_ptr<DraftLengthPolicy> make_length_policy(const GenerateOptions& options);

}  // namespace specula
