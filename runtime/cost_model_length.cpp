#include "runtime/cost_model_length.h"

#include <algorithm>

namespace specula {
namespace {

// What the chooser needs of one sequence allowed chains of up to max_gamma tokens, whose
// drafter can propose at most `limit` tokens this step.
LoadSequence load_sequence(const SequenceView& s, int max_gamma, int limit) {
  const ChainAcceptance others = s.pool->without(*s.own);
  const DraftOptions& draft = s.options->draft;
  LoadSequence l;
  // Drafters with a draft distribution end chains at their stop (n-grams have none); those
  // with a cache of their own (a draft model, an EAGLE-3 head) feed the accepted tokens in
  // their next first round; siblings are proposed by drafters that grow trees freely
  // (Medusa's are one head per depth).
  l.confidence_stop = draft.method != DraftMethod::kNgram;
  ChainPrice price = chain_price_among(*s.own, others, max_gamma, kAcceptancePriorTrials, l.confidence_stop);
  l.tokens = std::move(price.tokens);
  l.reaches = std::move(price.reaches);
  l.proposal_rate = proposal_rate_among(*s.own, others, kAcceptancePriorTrials);
  if (draft.method == DraftMethod::kModel || drafts_with_eagle_head(draft.method))
    l.sibling_tokens = sibling_rate_among(*s.own, others, kAcceptancePriorTrials);
  l.catch_up_rows = s.spec->draft_catch_up_rows();
  l.remaining_tokens = s.remaining_tokens;
  l.feeds_accepted = draft.method == DraftMethod::kModel || drafts_with_eagle_head(draft.method);
  l.depth_limit = std::min(limit, l.remaining_tokens - 1);  // the bonus token needs room too
  return l;
}

}  // namespace

void CostModelLength::plan(const StepView& step, std::span<const SequenceView> sequences,
                           std::span<std::optional<DraftBound>> bounds) {
  scouting_ = false;
  if (sequences.empty()) return;
  std::vector<int> limits;
  int max_gamma = 0;
  for (const SequenceView& s : sequences) {
    const int limit = s.spec->proposal_limit();
    s.own->add_lookup(limit > 0);
    s.pool->add_lookup(limit > 0);
    limits.push_back(limit);
    max_gamma = std::max(max_gamma, s.options->draft.gamma);
  }
  std::vector<LoadSequence> load;
  for (std::size_t i = 0; i < sequences.size(); ++i) load.push_back(load_sequence(sequences[i], max_gamma, limits[i]));
  const LoadChoice choice = chooser_.choose(step.other_rows, step.other_tokens, load, max_gamma, step.closed);
  scouting_ = choice.scout >= 0;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const bool left_out = (scouting_ && static_cast<int>(i) != choice.scout) || limits[i] == 0;
    DraftBound bound;
    // The bonus token needs room too: at most remaining - 1 drafted levels.
    bound.max_depth = left_out ? 0 : std::min(sequences[i].remaining_tokens - 1, choice.gamma);
    bound.stop_below = choice.stop_below;
    bound.siblings = scouting_ || load[i].sibling_tokens <= 0 ? 0 : choice.siblings;
    bound.max_nodes = bound.max_depth;  // its rows: 1 + the chosen length
    bounds[i] = bound.max_depth == 0 ? std::nullopt : std::optional<DraftBound>(bound);
  }
}

void CostModelLength::observe(const StepOutcome& outcome) {
  double calls_s = 0;
  for (const DraftCall& c : outcome.draft_calls) calls_s += c.seconds;
  for (const DraftCall& c : outcome.draft_calls)
    chooser_.draft_round(c.rows, calls_s > 0 ? c.seconds * outcome.draft_s / calls_s : 0);
  if (outcome.drafting > 0 && outcome.draft_calls.empty())
    chooser_.draft_round(outcome.drafting, outcome.draft_s / std::max(1, outcome.deepest));
  if (outcome.prefill)
    chooser_.prefill_step(outcome.rows, outcome.seconds);
  else if (!scouting_)
    chooser_.target_forward(outcome.rows, outcome.seconds);
}

}  // namespace specula
