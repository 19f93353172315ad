#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace specula {

void CostFit::add(int rows, double seconds) {
  const auto [it, inserted] = by_rows_.emplace(rows, seconds);
  if (!inserted) it->second += kNewest * (seconds - it->second);
}

double CostFit::at(double rows) const {
  if (by_rows_.empty()) return 0;
  if (by_rows_.size() == 1) return by_rows_.begin()->second;
  // The two observed row counts around `rows`, or the two outermost on its side.
  auto hi = by_rows_.lower_bound(static_cast<int>(std::ceil(rows)));
  if (hi == by_rows_.end()) hi = std::prev(by_rows_.end());
  if (hi == by_rows_.begin()) hi = std::next(hi);
  const auto lo = std::prev(hi);
  double slope = (hi->second - lo->second) / double(hi->first - lo->first);
  const bool above = rows > hi->first, below = rows < lo->first;
  if (above || below) slope = std::max(0.0, slope);
  const auto& [from_rows, from_seconds] = above ? *hi : *lo;  // the nearest observed end
  return std::max(0.0, from_seconds + slope * (rows - from_rows));
}

double expected_chain_tokens(double alpha, int gamma) {
  if (alpha >= 1) return gamma + 1;
  return (1 - std::pow(alpha, gamma + 1)) / (1 - alpha);
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
  if (alphas.empty() || max_gamma <= 0) return 0;
  const int n = static_cast<int>(alphas.size());
  if (!target_.varied() || !draft_.observed()) {
    if (!target_.observed()) return 0;  // measure the plain step first
    double plain_tokens = other_tokens, probe_tokens = other_tokens;
    for (double a : alphas) plain_tokens += 1, probe_tokens += expected_chain_tokens(a, 1);
    const double plain_s = target_.at(other_rows + n);
    const double probe_floor_s = plain_s + n * row_floor();
    return probe_tokens * plain_s > plain_tokens * probe_floor_s ? 1 : 0;
  }
  int best = 0;
  double best_rate = -1;
  const double plain_s = target_.at(other_rows + n), floor = row_floor();
  for (int g = 0; g <= max_gamma; ++g) {
    double tokens = other_tokens;
    for (double a : alphas) tokens += expected_chain_tokens(a, g);
    // A chain of g: g draft rounds of n rows (the first also catches up), and g more rows
    // of each sequence in the target step, each at no less than row_floor() (the fit's slope
    // comes from decode steps of a few row counts, each figure noisy; the floor from whole
    // prefill steps).
    const double target_s = std::max(target_.at(other_rows + n * (1 + g)), plain_s + n * g * floor);
    const double seconds = target_s + g * draft_.at(n);
    const double rate = seconds > 0 ? tokens / seconds : tokens;
    if (rate > best_rate) best = g, best_rate = rate;
  }
  return best;
}

}  // namespace specula
