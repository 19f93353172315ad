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
  // The figures in use: the settled ones once there are any, else every (single) one.
  figures_.clear();
  for (const auto& [r, fig] : by_rows_)
    if (fig.observations >= 2) figures_[r] = fig.seconds;
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
  for (std::size_t k = 0; k < rest.tried_at.size() && k < part.tried_at.size(); ++k) {
    rest.tried_at[k] = std::max(0.0, tried_at[k] - part.tried_at[k]);
    rest.passed_at[k] = std::max(0.0, passed_at[k] - part.passed_at[k]);
  }
  return rest;
}

std::vector<double> chain_tokens(const ChainAcceptance& own, const ChainAcceptance& pool, int max_gamma,
                                 double prior_trials) {
  const ChainAcceptance others = pool.without(own);
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
                                      int max_gamma) {
  if (load.empty() || max_gamma <= 0) return {};
  const int n = static_cast<int>(load.size());
  double plain_tokens = other_tokens, remaining = 0;
  int catch_up_rows = 0;
  for (const LoadSequence& s : load) {
    plain_tokens += s.tokens.at(0);
    remaining += s.remaining_tokens;
    catch_up_rows += s.catch_up_rows;
  }
  const double plain_s = target_.at(other_rows + n);
  // The draft model's catch-up: its rows at the fitted slope; from one figure, at that
  // figure's cost per row (its fixed part included: an upper bound).
  double catch_up_s = 0;
  if (catch_up_rows > 0 && draft_.observed())
    catch_up_s = draft_.varied() ? std::max(0.0, draft_.at(n + catch_up_rows) - draft_.at(n))
                                 : catch_up_rows * draft_.fewest() / draft_.fewest_rows();
  // Drafting at `rate` against plain at plain_rate: kMargin faster, and over the remaining
  // tokens its saving repays the catch-up.
  const double margin = other_rows == 0 && n == 1 ? 0.0 : kMargin;
  const auto repays = [&](double rate, double plain_rate) {
    return rate > plain_rate * (1 + margin) && remaining * (1 / plain_rate - 1 / rate) > catch_up_s;
  };
  if (!target_.varied() || !draft_.observed()) {
    if (target_.observations(other_rows + n) < 3) return {};  // measure the plain step first (three times)
    double probe_tokens = other_tokens;
    for (const LoadSequence& s : load) probe_tokens += s.tokens.at(1);
    const double probe_floor_s = plain_s + n * row_floor() + draft_.at(n);  // at(): 0 before a round
    if (!repays(probe_tokens / probe_floor_s, plain_tokens / plain_s)) return {};
    if (draft_.observed() || n == 1) return {1, -1};
    const auto fewest = std::min_element(load.begin(), load.end(), [](const LoadSequence& a, const LoadSequence& b) {
      return a.catch_up_rows < b.catch_up_rows;
    });
    return {1, static_cast<int>(fewest - load.begin())};
  }
  int best = 0;
  double best_rate = plain_tokens / std::max(plain_s, 1e-12);
  const double plain_rate = best_rate;
  for (int g = 1; g <= max_gamma; ++g) {
    double tokens = other_tokens, accepted_rows = 0;
    for (const LoadSequence& s : load) {
      tokens += s.tokens.at(static_cast<std::size_t>(g));
      if (s.feeds_accepted) accepted_rows += s.tokens.at(static_cast<std::size_t>(g)) - 1;
    }
    // A chain of g: g draft rounds of n rows (the first also feeds what the last step accepted),
    // and g more rows of each sequence in the target step.
    const double seconds =
        target_.at(other_rows + n * (1 + g)) + draft_.at(n + accepted_rows) + (g - 1) * draft_.at(n);
    const double rate = seconds > 0 ? tokens / seconds : tokens;
    if (rate > best_rate) best = g, best_rate = rate;
  }
  if (best > 0 && !repays(best_rate, plain_rate)) best = 0;
  if (best == 0) {
    drafted_steps_ = 0;
    // Exploration: the figures that keep it plain come from a few steps (the first request's
    // first rejections put an n-gram chain at 1.04 tokens for good at batch 1, where it makes
    // 1.5). Where one γ = 1 step would pay if every drafted token were accepted, and the
    // catch-up costs no more than a plain step, every kPlainEvery-th plain step drafts.
    const double sure_rate = (other_tokens + 2.0 * n) / std::max(target_.at(other_rows + 2 * n) + draft_.at(n), 1e-12);
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
