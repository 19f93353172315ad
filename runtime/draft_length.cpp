#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>

namespace specula {
namespace {

constexpr double kForget = 0.97;  // weight of an observation per later one (~33 steps of memory)

}  // namespace

void CostFit::add(double rows, double seconds) {
  w_ = kForget * w_ + 1;
  sx_ = kForget * sx_ + rows;
  sy_ = kForget * sy_ + seconds;
  sxx_ = kForget * sxx_ + rows * rows;
  sxy_ = kForget * sxy_ + rows * seconds;
}

bool CostFit::varied() const { return w_ > 0 && sxx_ / w_ - (sx_ / w_) * (sx_ / w_) > 0.25; }

double CostFit::at(double rows) const {
  if (w_ == 0) return 0;
  const double mx = sx_ / w_, my = sy_ / w_;
  double slope = 0;
  if (varied()) slope = std::max(0.0, (sxy_ / w_ - mx * my) / (sxx_ / w_ - mx * mx));
  return std::max(0.0, my + slope * (rows - mx));
}

double expected_chain_tokens(double alpha, int gamma) {
  if (alpha >= 1) return gamma + 1;
  return (1 - std::pow(alpha, gamma + 1)) / (1 - alpha);
}

int DraftLengthChooser::choose(int other_rows, double other_tokens, std::span<const double> alphas, int max_gamma) {
  ++calls_;
  if (alphas.empty() || max_gamma <= 0) return 0;
  if (!target_.varied() || !draft_.observed()) return calls_ % 2 ? max_gamma : 0;
  const int n = static_cast<int>(alphas.size());
  int best = 0;
  double best_rate = -1;
  for (int g = 0; g <= max_gamma; ++g) {
    double tokens = other_tokens;
    for (double a : alphas) tokens += expected_chain_tokens(a, g);
    // A chain of g: g draft rounds over the n sequences (the first also catches up), and
    // g more rows of each in the target forward.
    const double seconds = target_.at(other_rows + n * (1 + g)) + g * draft_.at(n);
    const double rate = seconds > 0 ? tokens / seconds : tokens;
    if (rate > best_rate) best = g, best_rate = rate;
  }
  return best;
}

}  // namespace specula
