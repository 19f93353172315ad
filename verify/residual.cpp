#include "verify/residual.h"

#include <algorithm>

#include "base/lane_sum.h"

namespace specula {

template <typename Visit>
void Residual::for_each_weight(Visit visit) const {
  if (!dense_.empty()) {
    for (int v = 0; v < vocab(); ++v)
      if (!visit(v, dense_[v])) return;
    return;
  }
  auto next_removed = removed_.begin();
  for (int v = 0; v < vocab(); ++v) {
    double w = row_[v];
    if (next_removed != removed_.end() && *next_removed == v) {
      w = 0.0;
      ++next_removed;
    }
    if (!visit(v, w)) return;
  }
}

Residual Residual::from_weights(std::vector<double> weights) {
  Residual r{std::span<const float>()};
  r.mass_ = 0.0;
  for (double w : weights) r.mass_ += w;
  r.dense_ = std::move(weights);
  return r;
}

double Residual::weight(int token) const {
  if (!dense_.empty()) return dense_[token];
  return std::binary_search(removed_.begin(), removed_.end(), token) ? 0.0 : double(row_[token]);
}

void Residual::remove(int token) {
  const double w = weight(token);
  if (w == 0.0) return;
  mass_ = std::max(mass_ - w, 0.0);
  if (!dense_.empty()) {
    dense_[token] = 0.0;
  } else {
    removed_.insert(std::lower_bound(removed_.begin(), removed_.end(), token), token);
  }
}

void Residual::subtract(const Residual& q) {
  if (mass_ <= 0.0 || q.mass_ <= 0.0) return;
  std::vector<double> next(vocab());
  for_each_weight([&](int v, double w) {
    next[v] = w / mass_;
    return true;
  });
  q.for_each_weight([&](int v, double w) {
    next[v] = std::max(next[v] - w / q.mass_, 0.0);
    return true;
  });
  mass_ = 0.0;
  for (double w : next) mass_ += w;
  dense_ = std::move(next);
  removed_.clear();
}

double Residual::total() const {
  if (!dense_.empty()) return lane_sum(std::span<const double>(dense_));
  double total = lane_sum(row_);
  for (int token : removed_) total -= row_[token];
  return total;
}

int Residual::sample(double u) const {
  const double total = this->total();
  if (total <= 0.0) return -1;
  const double target = u * total;
  double cumulative = 0.0;
  int chosen = -1;
  for_each_weight([&](int v, double w) {
    if (w <= 0.0) return true;
    cumulative += w;
    chosen = v;
    return cumulative <= target;
  });
  return chosen;
}

}  // namespace specula
