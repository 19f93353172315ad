// defines: CostModelLength, the load-adaptive draft length (draft.gamma_policy = "load") as a
// DraftLengthPolicy: each step it prices the chains its sequences could draft from their
// acceptance evidence (ChainPrice) and asks DraftLengthChooser (runtime/draft_length.h) for
// the one chain length, or a scout step, that maximises the step's expected tokens per
// second; after each step it feeds the chooser the costs the step measured. One scheduler
// shares one, so that every load request's step and draft costs are fitted together.
//
// Usage (runtime/scheduler.cpp):
//   CostModelLength cost_model;                                // one per scheduler
//   cost_model.plan(StepView{batch, other_rows, other_tokens, closed}, load_views, bounds);
//   ... draft rounds, one target forward, verify, commit ...
//   cost_model.observe(outcome);                               // every step, drafted or not
#pragma once

#include "runtime/draft_length.h"
#include "runtime/draft_length_policy.h"

namespace specula {

class CostModelLength final : public DraftLengthPolicy {
 public:
  // Each sequence's n-gram lookup (SpeculativeSequence::proposal_limit) counts in its
  // evidence (own and pool); a sequence with nothing to propose takes a plain step beside the
  // others and is still weighed in a closed batch's end. In a scout step only the scout
  // drafts, without siblings; siblings go only to drafters that propose them.
  void plan(const StepView& step, std::span<const SequenceView> sequences,
            std::span<std::optional<DraftBound>> bounds) override;
  // The draft rounds' costs: each draft-model call by its rows, the rest of the draft phase
  // (starting proposals, the draft distributions, building the trees) shared among the calls
  // in proportion to their time; or, where no model ran (n-grams), the mean round over the
  // drafting sequences. The step's cost: a prefill step's bounds a row's cost from below
  // (DraftLengthChooser::row_floor); a decode step's is fitted, but not a scout step's.
  void observe(const StepOutcome& outcome) override;

  const DraftLengthChooser& chooser() const { return chooser_; }

 private:
  DraftLengthChooser chooser_;
  bool scouting_ = false;  // the last plan was a scout step
};

}  // namespace specula
