// defines: DraftLengthPolicy, how far each speculative sequence may draft in a step (its
// DraftBound: depth, confidence stop, siblings; or none: a plain step), called at two points
// of every step: plan() before the draft rounds, observe() after the target forward; what it
// sees (StepView, SequenceView, StepOutcome); and the two per-sequence policies: FixedLength
// (the drafter's own length, draft.gamma_policy = "fixed") and ThresholdLength (a confidence
// stop on the chain's draft probability and a batch-size cut-off, "threshold": the baseline
// any smarter policy must beat). The cost model ("load") is runtime/cost_model_length.h.
//
// Usage (runtime/scheduler.cpp):
//   std::unique_ptr<DraftLengthPolicy> policy = make_length_policy(options);
//   std::vector<std::optional<DraftBound>> bounds(views.size());
//   policy->plan(StepView{batch, other_rows, other_tokens, closed}, views, bounds);
//   for (std::size_t i = 0; i < views.size(); ++i) {
//     if (!bounds[i]) views[i].spec->start_plain();  // the root row alone, no draft forward
//     else drafting.push_back({views[i].spec, *bounds[i]});
//   }
//   run_drafts(...); one target forward; verify; commit;
//   policy->observe(StepOutcome{draft_calls, draft_s, drafting, deepest, rows, seconds, prefill});
// A policy reads only what the step is about to do and what earlier steps did, never a
// verification uniform, so the output law and greedy output stay what the verifier makes them.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "draft/drafter.h"
#include "runtime/draft_length.h"
#include "runtime/generate_options.h"
#include "runtime/speculative_sequence.h"

namespace specula {

// The step being planned, as a policy sees it.
struct StepView {
  int sequences = 0;        // sequences with rows in this step (the batch)
  int other_rows = 0;       // rows of the step's sequences this policy does not plan
  double other_tokens = 0;  // tokens those are expected to bring
  bool closed = false;      // nothing waits to take a finished sequence's place
};

// One speculative sequence the policy plans, as it sees it.
struct SequenceView {
  int remaining_tokens = 0;                  // tokens its request may still emit (the bonus token included)
  SpeculativeSequence* spec = nullptr;       // its drafter's state: catch-up rows, proposal limit
  const GenerateOptions* options = nullptr;  // its request's
  ChainAcceptance* own = nullptr;            // its request's acceptance evidence
  ChainAcceptance* pool = nullptr;           // every request's of its drafter and sampling (own included)
};

// What a step did.
struct StepOutcome {
  std::vector<DraftCall> draft_calls;  // its batched draft-model calls
  double draft_s = 0;                  // its whole draft phase, with the device time of draws left on a device
  int drafting = 0;                    // sequences that drafted
  int deepest = 0;                     // the deepest bound among them
  int rows = 0;                        // target rows
  double seconds = 0;                  // the target forward and the sampling, verification and commits after it
  bool prefill = false;                // a prefill chunk was among its rows
};

class DraftLengthPolicy {
 public:
  virtual ~DraftLengthPolicy() = default;
  // bounds[i]: the bound of sequences[i] this step, or nullopt for a plain step.
  virtual void plan(const StepView& step, std::span<const SequenceView> sequences,
                    std::span<std::optional<DraftBound>> bounds) = 0;
  // After every step, whichever sequences it planned.
  virtual void observe(const StepOutcome& /*outcome*/) {}
};

// A policy that bounds each sequence on its own and learns nothing from steps.
class PerSequenceLength : public DraftLengthPolicy {
 public:
  void plan(const StepView& step, std::span<const SequenceView> sequences,
            std::span<std::optional<DraftBound>> bounds) final;
  virtual std::optional<DraftBound> bound(const StepView& step, const SequenceView& sequence) const = 0;
};

// The drafter's own length (draft.gamma, a tree's depth, the adaptive chain's), within the
// tokens left, with draft.siblings beside a chain's first token.
class FixedLength final : public PerSequenceLength {
 public:
  explicit FixedLength(int siblings) : siblings_(siblings) {}
  std::optional<DraftBound> bound(const StepView& step, const SequenceView& sequence) const override;

 private:
  int siblings_;
};

// A plain step once more than max_batch sequences share the step (0: no cut-off); otherwise
// the drafter's length with the chain ending after the token at which the product of its
// draft probabilities falls below stop_below (draft models; n-grams propose without it).
class ThresholdLength final : public PerSequenceLength {
 public:
  ThresholdLength(double stop_below, int max_batch) : stop_below_(stop_below), max_batch_(max_batch) {}
  std::optional<DraftBound> bound(const StepView& step, const SequenceView& sequence) const override;

 private:
  double stop_below_;
  int max_batch_;
};

// A request's own policy from options.gamma_policy: FixedLength or ThresholdLength; nullptr
// for "load", whose cost model one scheduler shares among its requests (it fits the costs of
// the steps they share).
std::unique_ptr<DraftLengthPolicy> make_length_policy(const GenerateOptions& options);

}  // namespace specula
