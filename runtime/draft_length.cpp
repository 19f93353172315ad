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

LoadChoice DraftLengthChooser::choose(int other_rows, double other_tokens, std::span<const LoadSequence> load,
                                      int max_gamma, bool closed) {
  if (load.empty() || max_gamma <= 0) return {};
  const int n = static_cast<int>(load.size());
  // The sequences that can draft this step (the others, depth_limit 0, take a plain step).
  const int drafting = static_cast<int>(
      std::count_if(load.begin(), load.end(), [](const LoadSequence& s) { return s.depth_limit > 0; }));
  if (drafting == 0) return {};
  double remaining = 0;
  int catch_up_rows = 0;
  for (const LoadSequence& s : load) {
    remaining += s.remaining_tokens;
    if (s.depth_limit > 0) catch_up_rows += s.catch_up_rows;
  }
  // A sequence's chain of g this step: its length; and over the steps to come, where this
  // step's n-gram lookup does not bound it, only the tokens it has left do.
  const auto length = [](const LoadSequence& s, int g) { return std::min(g, s.depth_limit); };
  const auto future_length = [](const LoadSequence& s, int g) { return std::max(0, std::min(g, s.remaining_tokens - 1)); };
  // The chance that a sequence's chain of g drafts its k-th token (k <= g).
  const auto reach = [&](const LoadSequence& s, int g, int k) {
    if (k > length(s, g)) return 0.0;
    return s.reaches.empty() ? 1.0 : s.reaches.at(static_cast<std::size_t>(k));
  };
  // The sibling rows of a sequence's chain of `l` tokens, with `siblings`: one where the chain
  // stops short of l (a sibling fits within its nodes).
  const auto sibling_rows = [&](const LoadSequence& s, int l, bool siblings) {
    if (!siblings || l <= 0 || s.sibling_tokens <= 0) return 0.0;
    return 1 - (s.reaches.empty() ? 1.0 : s.reaches.at(static_cast<std::size_t>(l)));
  };
  // The tokens a sequence's chain of `l` tokens brings (all of them accepted where `sure`).
  const auto chain_tokens = [&](const LoadSequence& s, int l, bool sure, bool siblings) {
    if (sure) return 1.0 + l;
    return s.tokens.at(static_cast<std::size_t>(l)) + sibling_rows(s, l, siblings) * s.sibling_tokens;
  };
  const auto step_tokens = [&](const LoadSequence& s, int g, bool sure, bool siblings = false) {
    return chain_tokens(s, length(s, g), sure, siblings);
  };
  // Target rows of a step at chain length g: the roots and the tokens expected to be drafted.
  const auto rows_at = [&](int g, bool siblings = false) {
    double rows = other_rows;
    for (const LoadSequence& s : load) {
      rows += 1 + sibling_rows(s, length(s, g), siblings);
      for (int k = 1; k <= g; ++k) rows += reach(s, g, k);
    }
    return rows;
  };
  // Draft rounds 2..g (round k draws the k-th tokens): the chance that any sequence drafts
  // that far, times a round of the rows expected when one does.
  const auto later_rounds_s = [&](int g) {
    double seconds = 0;
    for (int k = 2; k <= g; ++k) {
      double rows = 0, none = 1;
      for (const LoadSequence& s : load) rows += reach(s, g, k), none *= 1 - reach(s, g, k);
      if (none < 1) seconds += (1 - none) * draft_.at(rows / (1 - none));
    }
    return seconds;
  };
  // Tokens a second of steps of `seconds` at chain length g: the step's tokens over its time;
  // in a closed batch, the remaining tokens over the time until its slowest sequence is done.
  const auto rate = [&](int g, double seconds, bool sure, bool siblings = false) {
    seconds = std::max(seconds, 1e-12);
    if (!closed) {
      double tokens = other_tokens;
      for (const LoadSequence& s : load) tokens += step_tokens(s, g, sure, siblings);
      return tokens / seconds;
    }
    // The slowest sequence's steps, every load-policy sequence's counted, those without an
    // n-gram match this step too: they hold back the batch's end as much as the others.
    double steps = 0;
    for (const LoadSequence& s : load) {
      const double drafted = chain_tokens(s, future_length(s, g), sure, siblings) - 1;
      steps = std::max(steps, s.remaining_tokens / (1 + s.proposal_rate * drafted));
    }
    return remaining / (seconds * std::max(steps, 1e-12));
  };
  const double plain_s = target_.at(other_rows + n);
  const double plain_rate = rate(0, plain_s, false);
  // The draft model's catch-up: its rows at the fitted slope; from one figure, at that
  // figure's cost per row (its fixed part included: an upper bound).
  double catch_up_s = 0;
  if (catch_up_rows > 0 && draft_.observed())
    catch_up_s = draft_.varied() ? std::max(0.0, draft_.at(drafting + catch_up_rows) - draft_.at(drafting))
                                 : catch_up_rows * draft_.fewest() / draft_.fewest_rows();
  // Drafting at `drafting_rate`: kMargin faster than plain, and over the remaining tokens its
  // saving repays the catch-up.
  const bool lone = other_rows == 0 && n == 1;
  const double margin = lone ? 0.0 : kMargin;
  const auto repays = [&](double drafting_rate, double catch_up_seconds) {
    return drafting_rate > plain_rate * (1 + margin) &&
           remaining * (1 / plain_rate - 1 / drafting_rate) > catch_up_seconds;
  };
  if (!target_.varied() || !draft_.observed()) {
    if (target_.observations(other_rows + n) < 3) return {};  // measure the plain step first (three times)
    // The probe's round of n sequences at n one-sequence rounds (0 before a round): the scout
    // priced one sequence's round, and a round's cost is mostly per sequence (each has its
    // own logits, draft distribution and draw); batching saves no more than that.
    // A lone sequence's probe is its own scout and commits no one else's catch-up: its draft
    // rounds are free in this bound until its step has two measurements (a step's first
    // figures are cold, and so may be a row floor from the first prefill).
    const double probe_draft_s = n == 1 ? 0.0 : drafting * draft_.fewest();
    const double probe_floor_s = plain_s + (rows_at(1) - other_rows - n) * row_floor() + probe_draft_s;
    const auto fewest = std::min_element(load.begin(), load.end(), [](const LoadSequence& a, const LoadSequence& b) {
      return (a.depth_limit > 0) != (b.depth_limit > 0) ? a.depth_limit > 0 : a.catch_up_rows < b.catch_up_rows;
    });
    // Before any draft round, the scout's own catch-up with each draft row at row_floor(): a
    // scout late in a batch feeds every token committed so far to the draft model for the
    // few tokens left.
    const double first_catch_up_s = draft_.observed() ? catch_up_s : fewest->catch_up_rows * row_floor();
    if (!repays(rate(1, probe_floor_s, false), first_catch_up_s)) return {};
    // The scout drafts two tokens: its second round, of one row, prices a round's fixed part
    // (the catch-up round alone, of many rows, puts too little of its cost in that part, and
    // the probe's round of n sequences priced from it would be underpriced).
    const int scout_gamma = std::min(2, max_gamma);
    if (n == 1) return {scout_gamma, -1};
    if (draft_.observed()) return {1, -1};
    return {scout_gamma, static_cast<int>(fewest - load.begin())};
  }
  // Chains that end at their draft's doubt are allowed the longest length or none: their stop
  // sets each one's depth from what the draft sees of it, which per-depth averages do not.
  const bool stops = std::all_of(load.begin(), load.end(), [](const LoadSequence& s) { return s.confidence_stop; });
  const bool any_siblings =
      std::any_of(load.begin(), load.end(), [](const LoadSequence& s) { return s.sibling_tokens > 0; });
  int best = 0;
  bool best_siblings = false;
  double best_rate = plain_rate;
  for (int g = stops ? max_gamma : 1; g <= max_gamma; ++g) {
    for (const bool siblings : {false, true}) {
      if (siblings && !any_siblings) continue;
      double accepted_rows = 0;
      for (const LoadSequence& s : load)
        if (s.feeds_accepted) accepted_rows += step_tokens(s, g, false, siblings) - 1;
      // A chain of g: up to g draft rounds (the first of all n sequences, which also feeds
      // what the last step accepted), and each sequence's chain and sibling rows in the
      // target step (siblings need no draft round).
      const double seconds = target_.at(rows_at(g, siblings)) + draft_.at(drafting + accepted_rows) + later_rounds_s(g);
      const double r = rate(g, seconds, false, siblings);
      if (r > best_rate) best = g, best_siblings = siblings, best_rate = r;
    }
  }
  if (best > 0 && !repays(best_rate, catch_up_s)) best = 0;
  if (best == 0) {
    drafted_steps_ = 0;
    // Exploration: where one γ = 1 step would pay if every drafted token were accepted, and
    // the catch-up costs no more than a plain step, every kPlainEvery-th plain step drafts,
    // so that a price set by a few early rejections (which also set the others' prior) is
    // measured again.
    const double sure_rate = rate(1, target_.at(rows_at(1)) + draft_.at(drafting), true);
    if (++plain_steps_ >= kPlainEvery && sure_rate > plain_rate * (1 + margin) && catch_up_s <= plain_s) {
      plain_steps_ = 0;
      return {1, -1};
    }
    return {};
  }
  plain_steps_ = 0;
  if (++drafted_steps_ >= (lone ? kLonePlainEvery : kPlainEvery)) {
    drafted_steps_ = 0;
    return {};  // the plain step's cost, measured again
  }
  // A drafted token costs a target row and a draft round's row; it is worth one token at the
  // chosen rate where the chain so far passes.
  const double rows = rows_at(best, best_siblings);
  const double token_cost_s = std::max(0.0, target_.at(rows + 1) - target_.at(rows)) + draft_.at(drafting) / drafting;
  return {best, -1, std::min(1.0, token_cost_s * best_rate), best_siblings ? 1 : 0};
}

}  // namespace specula
