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

void ChainAcceptance::add(int drafted, int accepted_tokens, bool chain) {
  accepted += accepted_tokens;
  trials += accepted_tokens + (accepted_tokens < drafted ? 1 : 0);
  if (!chain) return;
  const int tried = std::min(accepted_tokens + 1, drafted);
  if (static_cast<int>(tried_at.size()) < tried) {
    tried_at.resize(static_cast<std::size_t>(tried));
    passed_at.resize(tried_at.size());
  }
  for (int k = 0; k < tried; ++k) {
    tried_at[static_cast<std::size_t>(k)] += 1;
    if (k < accepted_tokens) passed_at[static_cast<std::size_t>(k)] += 1;
  }
}

ChainAcceptance ChainAcceptance::without(const ChainAcceptance& part) const {
  ChainAcceptance rest = *this;
  rest.accepted = std::max(0.0, accepted - part.accepted);
  rest.trials = std::max(0.0, trials - part.trials);
  rest.lookups = std::max(0.0, lookups - part.lookups);
  rest.proposals = std::max(0.0, proposals - part.proposals);
  for (std::size_t k = 0; k < rest.tried_at.size() && k < part.tried_at.size(); ++k) {
    rest.tried_at[k] = std::max(0.0, tried_at[k] - part.tried_at[k]);
    rest.passed_at[k] = std::max(0.0, passed_at[k] - part.passed_at[k]);
  }
  return rest;
}

double proposal_rate_among(const ChainAcceptance& own, const ChainAcceptance& others, double prior_trials) {
  const double prior = (others.proposals + 1) / (others.lookups + 1);
  return (own.proposals + prior_trials * prior) / (own.lookups + prior_trials);
}

std::vector<double> chain_tokens_among(const ChainAcceptance& own, const ChainAcceptance& others, int max_gamma,
                                       double prior_trials) {
  const double alpha = chain_estimate_among(own, others, prior_trials);
  const double others_alpha = others.rate(0.5, 2);
  const auto logit = [](double p) { return std::log(p / (1 - p)); };
  const double shift = logit(alpha) - logit(others_alpha);
  const auto at = [](const std::vector<double>& v, int k) {
    return k < static_cast<int>(v.size()) ? v[static_cast<std::size_t>(k)] : 0.0;
  };
  std::vector<double> tokens(static_cast<std::size_t>(std::max(0, max_gamma)) + 1, 1.0);
  double reach = 1;  // the chance that depth k + 1's token is accepted with all before it
  for (int k = 0; k < max_gamma; ++k) {
    const double others_k = (at(others.passed_at, k) + 2 * others_alpha) / (at(others.tried_at, k) + 2);
    const double pooled = 1 / (1 + std::exp(-(logit(others_k) + shift)));
    reach *= (at(own.passed_at, k) + prior_trials * pooled) / (at(own.tried_at, k) + prior_trials);
    tokens[static_cast<std::size_t>(k) + 1] = tokens[static_cast<std::size_t>(k)] + reach;
  }
  return tokens;
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
  double remaining = 0;
  int catch_up_rows = 0;
  for (const LoadSequence& s : load) {
    remaining += s.remaining_tokens;
    catch_up_rows += s.catch_up_rows;
  }
  // A sequence's chain of g this step: its length, and the tokens it brings (all drafted
  // tokens accepted where `sure`).
  const auto length = [](const LoadSequence& s, int g) { return std::min(g, s.depth_limit); };
  const auto step_tokens = [&](const LoadSequence& s, int g, bool sure) {
    return sure ? 1.0 + length(s, g) : s.tokens.at(static_cast<std::size_t>(length(s, g)));
  };
  const auto rows_at = [&](int g) {
    int rows = other_rows;
    for (const LoadSequence& s : load) rows += 1 + length(s, g);
    return rows;
  };
  // Tokens a second of steps of `seconds` at chain length g: the step's tokens over its time;
  // in a closed batch, the remaining tokens over the time until its slowest sequence is done.
  const auto rate = [&](int g, double seconds, bool sure) {
    seconds = std::max(seconds, 1e-12);
    if (!closed) {
      double tokens = other_tokens;
      for (const LoadSequence& s : load) tokens += step_tokens(s, g, sure);
      return tokens / seconds;
    }
    double steps = 0;  // the slowest sequence's
    for (const LoadSequence& s : load) {
      const double drafted = sure ? g : s.tokens.at(static_cast<std::size_t>(g)) - 1;
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
    catch_up_s = draft_.varied() ? std::max(0.0, draft_.at(n + catch_up_rows) - draft_.at(n))
                                 : catch_up_rows * draft_.fewest() / draft_.fewest_rows();
  // Drafting at `drafting_rate`: kMargin faster than plain, and over the remaining tokens its
  // saving repays the catch-up.
  const double margin = other_rows == 0 && n == 1 ? 0.0 : kMargin;
  const auto repays = [&](double drafting_rate) {
    return drafting_rate > plain_rate * (1 + margin) && remaining * (1 / plain_rate - 1 / drafting_rate) > catch_up_s;
  };
  if (!target_.varied() || !draft_.observed()) {
    if (target_.observations(other_rows + n) < 3) return {};  // measure the plain step first (three times)
    const double probe_floor_s = plain_s + (rows_at(1) - other_rows - n) * row_floor() + draft_.at(n);  // at(): 0 before a round
    if (!repays(rate(1, probe_floor_s, false))) return {};
    if (draft_.observed() || n == 1) return {1, -1};
    const auto fewest = std::min_element(load.begin(), load.end(), [](const LoadSequence& a, const LoadSequence& b) {
      return a.catch_up_rows < b.catch_up_rows;
    });
    return {1, static_cast<int>(fewest - load.begin())};
  }
  int best = 0;
  double best_rate = plain_rate;
  for (int g = 1; g <= max_gamma; ++g) {
    double accepted_rows = 0;
    for (const LoadSequence& s : load)
      if (s.feeds_accepted) accepted_rows += step_tokens(s, g, false) - 1;
    // A chain of g: g draft rounds of n rows (the first also feeds what the last step accepted),
    // and each sequence's chain rows in the target step.
    const double seconds = target_.at(rows_at(g)) + draft_.at(n + accepted_rows) + (g - 1) * draft_.at(n);
    const double r = rate(g, seconds, false);
    if (r > best_rate) best = g, best_rate = r;
  }
  if (best > 0 && !repays(best_rate)) best = 0;
  if (best == 0) {
    drafted_steps_ = 0;
    // Exploration: the figures that keep it plain come from a few steps (the first request's
    // first rejections put an n-gram chain at 1.04 tokens for good at batch 1, where it makes
    // 1.5). Where one γ = 1 step would pay if every drafted token were accepted, and the
    // catch-up costs no more than a plain step, every kPlainEvery-th plain step drafts.
    const double sure_rate = rate(1, target_.at(rows_at(1)) + draft_.at(n), true);
    if (++plain_steps_ >= kPlainEvery && sure_rate > plain_rate * (1 + margin) && catch_up_s <= plain_s) {
      plain_steps_ = 0;
      return {1, -1};
    }
    return {};
  }
  plain_steps_ = 0;
  if (++drafted_steps_ == kPlainEvery) {
    drafted_steps_ = 0;
    return {};  // the plain step's cost, measured again
  }
  return {best, -1};
}

}  // namespace specula
