#include "experiments/stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <random>

namespace specula {
namespace {

// Continued fraction of the regularized incomplete beta function (modified Lentz).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300;
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  d = 1.0 / (std::fabs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    for (int half = 0; half < 2; ++half) {
      const double num = half == 0 ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
                                   : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1.0 + num * d;
      d = 1.0 / (std::fabs(d) < tiny ? tiny : d);
      c = 1.0 + num / c;
      if (std::fabs(c) < tiny) c = tiny;
      h *= d * c;
    }
    if (std::fabs(d * c - 1.0) < 1e-15) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                                b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1 - x) / b;
}

// P(T <= t) = 1/2 ± I_{t²/(df+t²)}(1/2, df/2) / 2, exact near t = 0 as well.
double student_t_cdf(double t, int df) {
  const double half_mass = 0.5 * incomplete_beta(0.5, df / 2.0, t * t / (df + t * t));
  return t >= 0 ? 0.5 + half_mass : 0.5 - half_mass;
}

}  // namespace

double student_t_quantile(double p, int df) {
  assert(p > 0 && p < 1 && df >= 1);
  double lo = -1.0, hi = 1.0;
  while (student_t_cdf(lo, df) > p) lo *= 2;
  while (student_t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * std::fmax(1.0, std::fabs(hi)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Interval geometric_mean_interval(const std::vector<double>& ratios, double level) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const std::size_t n = ratios.size();
  if (n == 0) return {nan, nan, nan};
  double sum = 0;
  for (double r : ratios) sum += std::log(r);
  const double mean = sum / n;
  if (n < 2) return {std::exp(mean), nan, nan};
  double squares = 0;
  for (double r : ratios) squares += (std::log(r) - mean) * (std::log(r) - mean);
  const double half_width = student_t_quantile(0.5 + level / 2, static_cast<int>(n) - 1) *
                            std::sqrt(squares / (n - 1) / n);
  return {std::exp(mean), std::exp(mean - half_width), std::exp(mean + half_width)};
}

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  return 0.5 * (values[mid] + *std::max_element(values.begin(), values.begin() + mid));
}

Interval bootstrap_ratio_interval(const std::vector<std::pair<double, double>>& units, double level, int resamples,
                                  uint64_t seed) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  auto ratio = [](double num, double den) { return den > 0 ? num / den : nan; };
  double num = 0, den = 0;
  for (const auto& [n, d] : units) num += n, den += d;
  Interval out{ratio(num, den), nan, nan};
  if (units.size() < 2) return out;
  std::mt19937_64 rng(seed);  // fully specified by the standard; the modulo below is too
  std::vector<double> ratios;
  ratios.reserve(static_cast<std::size_t>(resamples));
  for (int b = 0; b < resamples; ++b) {
    double n = 0, d = 0;
    for (std::size_t i = 0; i < units.size(); ++i) {
      const auto& unit = units[rng() % units.size()];
      n += unit.first;
      d += unit.second;
    }
    if (d > 0) ratios.push_back(n / d);
  }
  if (ratios.empty()) return out;
  std::sort(ratios.begin(), ratios.end());
  auto quantile = [&](double q) {  // linear interpolation between order statistics
    const double at = q * static_cast<double>(ratios.size() - 1);
    const std::size_t lo = static_cast<std::size_t>(at);
    const std::size_t hi = std::min(lo + 1, ratios.size() - 1);
    return ratios[lo] + (at - static_cast<double>(lo)) * (ratios[hi] - ratios[lo]);
  };
  out.low = quantile(0.5 - level / 2);
  out.high = quantile(0.5 + level / 2);
  return out;
}

std::vector<double> conditional_acceptance(const std::vector<double>& reached, double rounds) {
  std::vector<double> out;
  double before = rounds;
  for (double r : reached) {
    out.push_back(before > 0 ? r / before : std::numeric_limits<double>::quiet_NaN());
    before = r;
  }
  return out;
}

std::vector<double> accepted_histogram(const std::vector<double>& reached, double rounds) {
  std::vector<double> out;
  if (rounds <= 0) return out;
  double before = rounds;
  for (double r : reached) {
    out.push_back((before - r) / rounds);
    before = r;
  }
  out.push_back(before / rounds);
  return out;
}

double chain_acceptance_mle(double accepted, double rejecting_rounds) {
  return accepted + rejecting_rounds > 0 ? accepted / (accepted + rejecting_rounds)
                                         : std::numeric_limits<double>::quiet_NaN();
}

double expected_tokens_per_round(double alpha, int gamma) {
  double sum = 0, power = 1;
  for (long long i = 0; i <= gamma; ++i, power *= alpha) sum += power;  // gamma = INT_MAX: no overflow
  return sum;
}

double leviathan_speedup(double alpha, int gamma, double cost_ratio) {
  return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + 1);
}

double speedup_bound(double tau, double draft_step_ratio) { return tau / (1 + draft_step_ratio); }

}  // namespace specula
