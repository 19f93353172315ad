#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace specula {

void CostFit::add(int rows, double seconds) {
  const auto [it, inserted] = by_rows_.emplace(rows, Figure{seconds, 1});
  if (inserted) return;
  Figure& f = it->second;
  f.seconds = f.observations == 1 ? seconds : f.seconds + kNewest * (seconds - f.seconds);
  ++f.observations;
}

double CostFit::at(double rows) const {
  if (by_rows_.empty()) return 0;
  if (by_rows_.size() == 1) {
    const auto& [only_rows, only] = *by_rows_.begin();
    return rows >= only_rows ? only.seconds : only.seconds * std::max(0.0, rows) / only_rows;
  }
  // The two observed row counts around `rows`, or the two outermost on its side.
  auto hi = by_rows_.lower_bound(static_cast<int>(std::ceil(rows)));
  if (hi == by_rows_.end()) hi = std::prev(by_rows_.end());
  if (hi == by_rows_.begin()) hi = std::next(hi);
  const auto lo = std::prev(hi);
  double slope = (hi->second.seconds - lo->second.seconds) / double(hi->first - lo->first);
  const bool above = rows > hi->first, below = rows < lo->first;
  if (above || below) slope = std::max(0.0, slope);
  const auto& [from_rows, from] = above ? *hi : *lo;  // the nearest observed end
  return std::max(0.0, from.seconds + slope * (rows - from_rows));
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

std::vector<double> chain_tokens(const ChainAcceptance& own, const ChainAcceptance& pool, int max_gamma,
                                 double prior_trials) {
  const double alpha = chain_estimate(own, pool, prior_trials);
  const auto at = [](const std::vector<double>& v, int k) {
    return k < static_cast<int>(v.size()) ? v[static_cast<std::size_t>(k)] : 0.0;
  };
  std::vector<double> tokens(static_cast<std::size_t>(std::max(0, max_gamma)) + 1, 1.0);
  double reach = 1;  // the chance that depth k + 1's token is accepted with all before it
  for (int k = 0; k < max_gamma; ++k) {
    const double pooled = (at(pool.passed_at, k) + 2 * alpha) / (at(pool.tried_at, k) + 2);
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

int DraftLengthChooser::choose(int other_rows, double other_tokens, std::span<const std::vector<double>> chains,
                               int max_gamma) {
  if (chains.empty() || max_gamma <= 0) return 0;
  const int n = static_cast<int>(chains.size());
  const auto chain_at = [](const std::vector<double>& t, int g) { return t.at(static_cast<std::size_t>(g)); };
  if (!target_.varied() || !draft_.observed()) {
    if (!target_.observed()) return 0;  // measure the plain step first
    double plain_tokens = other_tokens, probe_tokens = other_tokens;
    for (const std::vector<double>& t : chains) plain_tokens += 1, probe_tokens += chain_at(t, 1);
    const double plain_s = target_.at(other_rows + n);
    const double probe_floor_s = plain_s + n * row_floor();
    return probe_tokens * plain_s > plain_tokens * probe_floor_s ? 1 : 0;
  }
  int best = 0;
  double best_rate = -1;
  for (int g = 0; g <= max_gamma; ++g) {
    double tokens = other_tokens;
    for (const std::vector<double>& t : chains) tokens += chain_at(t, g);
    // A chain of g: g draft rounds of n rows (the first also catches up), and g more rows
    // of each sequence in the target step.
    const double seconds = target_.at(other_rows + n * (1 + g)) + g * draft_.at(n);
    const double rate = seconds > 0 ? tokens / seconds : tokens;
    if (rate > best_rate) best = g, best_rate = rate;
  }
  if (best == 0) {
    drafted_steps_ = 0;
  } else if (++drafted_steps_ == kPlainEvery) {
    drafted_steps_ = 0;
    return 0;  // the plain step's cost, measured again
  }
  return best;
}

}  // namespace specula
