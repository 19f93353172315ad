#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace specula {

void CostFit::add(int rows, double seconds) {
  Figure& f = by_rows_[rows];
  if (f.observations == 1) f.recent.clear();  // the first observation is cold
  if (static_cast<int>(f.recent.size()) == kRecent) f.recent.erase(f.recent.begin());
  f.recent.push_back(seconds);
  ++f.observations;
  std::vector<double> sorted = f.recent;
  const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>((sorted.size() - 1) / 2);
  std::nth_element(sorted.begin(), middle, sorted.end());
  f.seconds = *middle;
  // The figures in use: the settled ones once there are any (where cold figures are set
  // aside), else every one.
  figures_.clear();
  for (const auto& [r, fig] : by_rows_)
    if (settle_ && fig.observations >= 2) figures_[r] = fig.seconds;
  if (figures_.empty())
    for (const auto& [r, fig] : by_rows_) figures_[r] = fig.seconds;
}

double CostFit::at(double rows) const {
  if (figures_.empty()) return 0;
  if (figures_.size() == 1) {
    const auto& [only_rows, only] = *figures_.begin();
    return rows >= only_rows ? only : only * std::max(0.0, rows) / only_rows;
  }
  // The two row counts around `rows`, or the two outermost on its side.
  auto hi = figures_.lower_bound(static_cast<int>(std::ceil(rows)));
  if (hi == figures_.end()) hi = std::prev(figures_.end());
  if (hi == figures_.begin()) hi = std::next(hi);
  const auto lo = std::prev(hi);
  double slope = (hi->second - lo->second) / double(hi->first - lo->first);
  const bool above = rows > hi->first, below = rows < lo->first;
  if (above || below) slope = std::max(0.0, slope);
  const auto& [from_rows, from] = above ? *hi : *lo;  // the nearest end in use
  return std::max(0.0, from + slope * (rows - from_rows));
}

double expected_chain_tokens(double alpha, int gamma) {
  if (alpha >= 1) return gamma + 1;
  return (1 - std::pow(alpha, gamma + 1)) / (1 - alpha);
}

namespace {

// counts[k] += 1 for k in [first, last), growing `counts` as needed.
void count(std::vector<double>& counts, int first, int last) {
  if (static_cast<int>(counts.size()) < last) counts.resize(static_cast<std::size_t>(last));
  for (int k = first; k < last; ++k) counts[static_cast<std::size_t>(k)] += 1;
}

// counts less part's, clamped at 0.
void subtract(std::vector<double>& counts, const std::vector<double>& part) {
  for (std::size_t k = 0; k < counts.size() && k < part.size(); ++k) counts[k] = std::max(0.0, counts[k] - part[k]);
}

double at(const std::vector<double>& counts, int k) {
  return k < static_cast<int>(counts.size()) ? counts[static_cast<std::size_t>(k)] : 0.0;
}

}  // namespace

void ChainAcceptance::add(int drafted, int accepted_tokens, bool chain, bool stopped) {
  accepted += accepted_tokens;
  trials += accepted_tokens + (accepted_tokens < drafted ? 1 : 0);
  if (!chain) return;
  const int tried = std::min(accepted_tokens + 1, drafted);
  count(tried_at, 0, tried);
  count(passed_at, 0, accepted_tokens);
  if (passed_at.size() < tried_at.size()) passed_at.resize(tried_at.size());
  count(drafted_at, 0, drafted);
  if (!stopped) return;
  count(stopped_at, drafted, drafted + 1);
  if (accepted_tokens == drafted) count(stopped_passed_at, drafted, drafted + 1);
}

ChainAcceptance ChainAcceptance::without(const ChainAcceptance& part) const {
  ChainAcceptance rest = *this;
  rest.accepted = std::max(0.0, accepted - part.accepted);
  rest.trials = std::max(0.0, trials - part.trials);
  rest.lookups = std::max(0.0, lookups - part.lookups);
  rest.proposals = std::max(0.0, proposals - part.proposals);
  rest.sibling_rows = std::max(0.0, sibling_rows - part.sibling_rows);
  rest.sibling_passed = std::max(0.0, sibling_passed - part.sibling_passed);
  subtract(rest.tried_at, part.tried_at);
  subtract(rest.passed_at, part.passed_at);
  subtract(rest.drafted_at, part.drafted_at);
  subtract(rest.stopped_at, part.stopped_at);
  subtract(rest.stopped_passed_at, part.stopped_passed_at);
  return rest;
}

double proposal_rate_among(const ChainAcceptance& own, const ChainAcceptance& others, double prior_trials) {
  const double prior = (others.proposals + 1) / (others.lookups + 1);
  return (own.proposals + prior_trials * prior) / (own.lookups + prior_trials);
}

double sibling_rate_among(const ChainAcceptance& own, const ChainAcceptance& others, double prior_trials) {
  const double prior = (others.sibling_passed + 1) / (others.sibling_rows + 2);
  return (own.sibling_passed + prior_trials * prior) / (own.sibling_rows + prior_trials);
}

ChainPrice chain_price_among(const ChainAcceptance& own, const ChainAcceptance& others, int max_gamma,
                             double prior_trials, bool confidence_stop) {
  const double alpha = chain_estimate_among(own, others, prior_trials);
  const double others_alpha = others.rate(0.5, 2);
  const auto logit = [](double p) { return std::log(p / (1 - p)); };
  const double shift = logit(alpha) - logit(others_alpha);
  // Own `hits` of `trials` with prior_trials pseudo-trials at the others' rate (2 pseudo-trials
  // at `prior` under theirs).
  const auto rate = [&](double hits, double trials, double others_hits, double others_trials, double prior) {
    return (hits + prior_trials * (others_hits + 2 * prior) / (others_trials + 2)) / (trials + prior_trials);
  };
  const std::size_t size = static_cast<std::size_t>(std::max(0, max_gamma)) + 1;
  ChainPrice price{std::vector<double>(size, 1.0), std::vector<double>(size, 1.0)};
  double passes = 1;  // the chance that depth k + 1's token is drafted and accepted with all before it
  for (int k = 0; k < max_gamma; ++k) {
    // The chance of drafting a token before any stop is seen: 1 at depth 1 (a stop follows a
    // token) and for chains without a stop; past it, alpha for chains with one.
    const double drafts_prior = confidence_stop && k > 0 ? alpha : 1.0;
    const double others_k = (at(others.passed_at, k) + 2 * others_alpha) / (at(others.tried_at, k) + 2);
    const double pooled = 1 / (1 + std::exp(-(logit(others_k) + shift)));
    const double passed = (at(own.passed_at, k) + prior_trials * pooled) / (at(own.tried_at, k) + prior_trials);
    const double drafted_after_pass =
        rate(at(own.tried_at, k), at(own.tried_at, k) + at(own.stopped_passed_at, k), at(others.tried_at, k),
             at(others.tried_at, k) + at(others.stopped_passed_at, k), drafts_prior);
    const double drafted =
        rate(at(own.drafted_at, k), at(own.drafted_at, k) + at(own.stopped_at, k), at(others.drafted_at, k),
             at(others.drafted_at, k) + at(others.stopped_at, k), drafts_prior);
    passes *= drafted_after_pass * passed;
    const std::size_t g = static_cast<std::size_t>(k) + 1;
    price.tokens[g] = price.tokens[g - 1] + passes;
    price.reaches[g] = price.reaches[g - 1] * drafted;
  }
  return price;
}

void DraftLengthChooser::prefill_step(int rows, double seconds) {
  if (rows < prefill_rows_) return;
  prefill_rows_ = rows;
  prefill_seconds_ = seconds;
}

double DraftLengthChooser::row_floor() const {
  if (prefill_rows_ == 0 || !target_.observed()) return 0;
  return std::max(0.0, (prefill_seconds_ - target_.fewest()) / prefill_rows_);
}

int DraftLengthChooser::choose(int other_rows, double other_tokens, std::span<const double> alphas, int max_gamma) {
  std::vector<std::vector<double>> tokens;
  for (double a : alphas) {
    std::vector<double>& t = tokens.emplace_back();
    for (int g = 0; g <= std::max(0, max_gamma); ++g) t.push_back(expected_chain_tokens(a, g));
  }
  return choose(other_rows, other_tokens, tokens, max_gamma);
}

int DraftLengthChooser::choose(int other_rows, double other_tokens, std::span<const std::vector<double>> tokens,
                               int max_gamma) {
  std::vector<LoadSequence> load;
  for (const std::vector<double>& t : tokens) load.push_back({t, 0, std::numeric_limits<int>::max() / 2});
  return choose(other_rows, other_tokens, load, max_gamma).gamma;
}

// A step of the chooser's sequences at each chain length g: its target rows, its seconds and
// the tokens a second it brings, from the fitted costs. Pure: it reads the fits and the
// sequences and changes nothing. (A sequence's chain of g is min(g, depth_limit) long.)
class StepModel {
 public:
  StepModel(int other_rows, double other_tokens, std::span<const LoadSequence> load, bool closed, const CostFit& target,
            const CostFit& draft)
      : other_rows_(other_rows), other_tokens_(other_tokens), load_(load), closed_(closed), target_(target),
        draft_(draft) {
    for (const LoadSequence& s : load) {
      remaining_ += s.remaining_tokens;
      if (s.depth_limit > 0) ++drafting_, catch_up_rows_ += s.catch_up_rows;
    }
  }

  int sequences() const { return static_cast<int>(load_.size()); }
  int drafting() const { return drafting_; }  // sequences that can draft this step (depth_limit > 0)
  // A lone sequence: no other rows and one sequence.
  bool lone() const { return other_rows_ == 0 && load_.size() == 1; }
  int other_rows() const { return other_rows_; }
  int plain_rows() const { return other_rows_ + sequences(); }
  double plain_s() const { return target_.at(plain_rows()); }
  double plain_rate() const { return rate(0, plain_s(), false); }

  // Target rows at chain length g: the roots, the tokens expected to be drafted and, with
  // `siblings`, a sibling row where a chain stops short of its length.
  double rows_at(int g, bool siblings = false) const {
    double rows = other_rows_;
    for (const LoadSequence& s : load_) {
      rows += 1 + sibling_rows(s, length(s, g), siblings);
      for (int k = 1; k <= g; ++k) rows += reach(s, g, k);
    }
    return rows;
  }
  // A step at chain length g: the target step, the first draft round (every drafting
  // sequence's root, and the tokens the last step accepted where its drafter feeds them) and
  // rounds 2..g (round k draws the k-th tokens: the chance that any sequence drafts that far,
  // times a round of the rows expected when one does). Siblings need no draft round.
  double chain_s(int g, bool siblings) const {
    double accepted_rows = 0;
    for (const LoadSequence& s : load_)
      if (s.feeds_accepted) accepted_rows += step_tokens(s, g, false, siblings) - 1;
    double later_rounds_s = 0;
    for (int k = 2; k <= g; ++k) {
      double rows = 0, none = 1;
      for (const LoadSequence& s : load_) rows += reach(s, g, k), none *= 1 - reach(s, g, k);
      if (none < 1) later_rounds_s += (1 - none) * draft_.at(rows / (1 - none));
    }
    return target_.at(rows_at(g, siblings)) + draft_.at(drafting_ + accepted_rows) + later_rounds_s;
  }
  // Tokens a second of steps of `seconds` at chain length g (every drafted token accepted
  // where `sure`): the step's tokens over its time; in a closed batch, the remaining tokens
  // over the time until its slowest sequence is done, every sequence counted, those without
  // an n-gram match this step too (they hold back the batch's end as much as the others).
  double rate(int g, double seconds, bool sure, bool siblings = false) const {
    seconds = std::max(seconds, 1e-12);
    if (!closed_) {
      double tokens = other_tokens_;
      for (const LoadSequence& s : load_) tokens += step_tokens(s, g, sure, siblings);
      return tokens / seconds;
    }
    double steps = 0;
    for (const LoadSequence& s : load_) {
      const double drafted = chain_tokens(s, future_length(s, g), sure, siblings) - 1;
      steps = std::max(steps, s.remaining_tokens / (1 + s.proposal_rate * drafted));
    }
    return remaining_ / (seconds * std::max(steps, 1e-12));
  }
  // The expected tokens a second of a step at chain length g.
  double expected_rate(int g, bool siblings) const { return rate(g, chain_s(g, siblings), false, siblings); }

  // The draft model's catch-up: its rows at the fitted slope; from one figure, at that
  // figure's cost per row (its fixed part included: an upper bound); 0 before a draft round.
  double catch_up_s() const {
    if (catch_up_rows_ == 0 || !draft_.observed()) return 0;
    return draft_.varied() ? std::max(0.0, draft_.at(drafting_ + catch_up_rows_) - draft_.at(drafting_))
                           : catch_up_rows_ * draft_.fewest() / draft_.fewest_rows();
  }
  // Drafting at `drafting_rate` pays: kMargin faster than plain (not for a lone sequence), and
  // over the remaining tokens its saving repays `catch_up_seconds`.
  bool repays(double drafting_rate, double catch_up_seconds) const {
    const double plain = plain_rate();
    return drafting_rate > plain * (1 + margin()) && remaining_ * (1 / plain - 1 / drafting_rate) > catch_up_seconds;
  }
  double margin() const { return lone() ? 0.0 : DraftLengthChooser::kMargin; }
  bool any_siblings() const {
    return std::any_of(load_.begin(), load_.end(), [](const LoadSequence& s) { return s.sibling_tokens > 0; });
  }
  // Chains that end at their draft's doubt: every sequence's drafter has a confidence stop.
  bool all_stop() const {
    return std::all_of(load_.begin(), load_.end(), [](const LoadSequence& s) { return s.confidence_stop; });
  }
  // The sequence that can draft with the fewest catch-up rows (the scout).
  int fewest_catch_up() const {
    const auto fewest = std::min_element(load_.begin(), load_.end(), [](const LoadSequence& a, const LoadSequence& b) {
      return (a.depth_limit > 0) != (b.depth_limit > 0) ? a.depth_limit > 0 : a.catch_up_rows < b.catch_up_rows;
    });
    return static_cast<int>(fewest - load_.begin());
  }
  const LoadSequence& at(int i) const { return load_[static_cast<std::size_t>(i)]; }

 private:
  static int length(const LoadSequence& s, int g) { return std::min(g, s.depth_limit); }
  // Over the steps to come, where this step's n-gram lookup does not bound a chain, only the
  // tokens it has left do.
  static int future_length(const LoadSequence& s, int g) { return std::max(0, std::min(g, s.remaining_tokens - 1)); }
  // The chance that a sequence's chain of g drafts its k-th token (k <= g).
  static double reach(const LoadSequence& s, int g, int k) {
    if (k > length(s, g)) return 0.0;
    return s.reaches.empty() ? 1.0 : s.reaches.at(static_cast<std::size_t>(k));
  }
  // The sibling rows of a sequence's chain of `l` tokens, with `siblings`: one where the
  // chain stops short of l (a sibling fits within its nodes).
  static double sibling_rows(const LoadSequence& s, int l, bool siblings) {
    if (!siblings || l <= 0 || s.sibling_tokens <= 0) return 0.0;
    return 1 - (s.reaches.empty() ? 1.0 : s.reaches.at(static_cast<std::size_t>(l)));
  }
  // The tokens a sequence's chain of `l` tokens brings (all of them accepted where `sure`).
  static double chain_tokens(const LoadSequence& s, int l, bool sure, bool siblings) {
    if (sure) return 1.0 + l;
    return s.tokens.at(static_cast<std::size_t>(l)) + sibling_rows(s, l, siblings) * s.sibling_tokens;
  }
  static double step_tokens(const LoadSequence& s, int g, bool sure, bool siblings) {
    return chain_tokens(s, length(s, g), sure, siblings);
  }

  int other_rows_;
  double other_tokens_;
  std::span<const LoadSequence> load_;
  bool closed_;
  const CostFit& target_;
  const CostFit& draft_;
  double remaining_ = 0;
  int drafting_ = 0, catch_up_rows_ = 0;
};

DraftLengthChooser::Phase DraftLengthChooser::phase(int plain_rows, int sequences) const {
  if (target_.varied() && draft_.observed()) return Phase::kChoosing;
  if (target_.observations(plain_rows) < kPlainFigures) return Phase::kMeasuringPlain;
  return draft_.observed() || sequences == 1 ? Phase::kProbing : Phase::kScouting;
}

LoadChoice DraftLengthChooser::choose(int other_rows, double other_tokens, std::span<const LoadSequence> load,
                                      int max_gamma, bool closed) {
  if (load.empty() || max_gamma <= 0) return {};
  const StepModel model(other_rows, other_tokens, load, closed, target_, draft_);
  if (model.drafting() == 0) return {};
  switch (phase(model.plain_rows(), model.sequences())) {
    case Phase::kMeasuringPlain: return {};
    case Phase::kScouting:
    case Phase::kProbing: return measure_drafting(model, max_gamma);
    case Phase::kChoosing: break;
  }
  return best_length(model, max_gamma);
}

LoadChoice DraftLengthChooser::measure_drafting(const StepModel& model, int max_gamma) const {
  const int n = model.sequences();
  // The probe's round of n sequences at n one-sequence rounds (0 before a round): the scout
  // priced one sequence's round, and a round's cost is mostly per sequence (each has its own
  // logits, draft distribution and draw); batching saves no more than that. A lone sequence's
  // probe is its own scout and commits no one else's catch-up: its draft rounds are free in
  // this bound until its step has two measurements (a step's first figures are cold, and so
  // may be a row floor from the first prefill).
  const double probe_draft_s = n == 1 ? 0.0 : model.drafting() * draft_.fewest();
  const double probe_floor_s = model.plain_s() + (model.rows_at(1) - model.other_rows() - n) * row_floor() + probe_draft_s;
  const int scout = model.fewest_catch_up();
  // Before any draft round, the scout's own catch-up with each draft row at row_floor(): a
  // scout late in a batch feeds every token committed so far to the draft model for the few
  // tokens left.
  const double first_catch_up_s = draft_.observed() ? model.catch_up_s() : model.at(scout).catch_up_rows * row_floor();
  if (!model.repays(model.rate(1, probe_floor_s, false), first_catch_up_s)) return {};
  // The scout drafts two tokens: its second round, of one row, prices a round's fixed part
  // (the catch-up round alone, of many rows, puts too little of its cost in that part, and the
  // probe's round of n sequences priced from it would be underpriced).
  const int scout_gamma = std::min(kScoutGamma, max_gamma);
  if (n == 1) return {scout_gamma, -1};
  if (draft_.observed()) return {1, -1};
  return {scout_gamma, scout};
}

LoadChoice DraftLengthChooser::best_length(const StepModel& model, int max_gamma) {
  // Chains that end at their draft's doubt are allowed the longest length or none: their stop
  // sets each one's depth from what the draft sees of it, which per-depth averages do not.
  const bool any_siblings = model.any_siblings();
  const double plain_rate = model.plain_rate();
  int best = 0;
  bool best_siblings = false;
  double best_rate = plain_rate;
  for (int g = model.all_stop() ? max_gamma : 1; g <= max_gamma; ++g) {
    for (const bool siblings : {false, true}) {
      if (siblings && !any_siblings) continue;
      const double r = model.expected_rate(g, siblings);
      if (r > best_rate) best = g, best_siblings = siblings, best_rate = r;
    }
  }
  if (best > 0 && !model.repays(best_rate, model.catch_up_s())) best = 0;
  if (best == 0) {
    drafted_steps_ = 0;
    // Exploration: where one γ = 1 step would pay if every drafted token were accepted, and
    // the catch-up costs no more than a plain step, every kPlainEvery-th plain step drafts,
    // so that a price set by a few early rejections (which also set the others' prior) is
    // measured again.
    const double sure_rate = model.rate(1, target_.at(model.rows_at(1)) + draft_.at(model.drafting()), true);
    if (++plain_steps_ >= kPlainEvery && sure_rate > plain_rate * (1 + model.margin()) &&
        model.catch_up_s() <= model.plain_s()) {
      plain_steps_ = 0;
      return {1, -1};
    }
    return {};
  }
  plain_steps_ = 0;
  if (++drafted_steps_ >= (model.lone() ? kLonePlainEvery : kPlainEvery)) {
    drafted_steps_ = 0;
    return {};  // the plain step's cost, measured again
  }
  // A drafted token costs a target row and a draft round's row; it is worth one token at the
  // chosen rate where the chain so far passes.
  const double rows = model.rows_at(best, best_siblings);
  const double token_cost_s =
      std::max(0.0, target_.at(rows + 1) - target_.at(rows)) + draft_.at(model.drafting()) / model.drafting();
  return {best, -1, std::min(1.0, token_cost_s * best_rate), best_siblings ? 1 : 0};
}

}  // namespace specula
