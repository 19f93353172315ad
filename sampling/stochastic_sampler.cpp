#include "sampling/stochastic_sampler.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/exp_shifted.h"
#include "base/lane_sum.h"

namespace specula {
namespace {

// Per-thread scratch, so distribution() stays const and allocation-free after warm-up.
struct Workspace {
  std::vector<float> x;  // [vocab] logits / temperature
  std::vector<int> ids;  // [vocab] candidate token ids; the kept set is a prefix
};

Workspace& workspace(size_t vocab) {
  thread_local Workspace ws;
  ws.x.resize(vocab);
  ws.ids.resize(vocab);
  return ws;
}

// Candidate order: larger scaled logit first, ties to the lower token id.
struct Before {
  const float* x;
  bool operator()(int a, int b) const { return x[a] > x[b] || (x[a] == x[b] && a < b); }
};

// Top-p buckets: a token's bucket is floor((x_max - x) * kBucketsPerNat), so bucket order
// is candidate order; tokens more than kBuckets / kBucketsPerNat = 32 nats below the top
// (probability ratio < 1.3e-14) share the last bucket.
constexpr int kBuckets = 2048;
constexpr float kBucketsPerNat = 64.0f;

// Top-p over the candidates ids[0, n): reorders them so that the nucleus comes first and
// returns its size.  A token is kept while the mass before it, in candidate order, is below
// `limit` (= p * total mass).  Partial selection by bucketing: one pass sums the mass per
// bucket, the walk over buckets finds the boundary bucket where the mass reaches the limit;
// tokens of earlier buckets are kept, later ones dropped, and only the boundary bucket is
// sorted.  O(n) plus the sort of one bucket, whatever the nucleus size.
//   ids: in/out [n]; x: in [vocab] scaled logits, max x_max; e: in [vocab] numerators
//   mass: out, the mass of the nucleus
int nucleus(int* ids, int n, const float* x, float x_max, const float* e, double limit, double& mass) {
  auto bucket = [&](int i) {
    const float distance = x_max - x[i];
    return distance < kBuckets / kBucketsPerNat ? int(distance * kBucketsPerNat) : kBuckets - 1;
  };
  std::array<double, kBuckets> bucket_mass{};
  for (int r = 0; r < n; ++r) bucket_mass[bucket(ids[r])] += e[ids[r]];
  mass = 0.0;
  int boundary = 0;
  while (boundary < kBuckets - 1 && mass + bucket_mass[boundary] < limit) mass += bucket_mass[boundary++];

  int* const first = std::partition(ids, ids + n, [&](int i) { return bucket(i) < boundary; });
  int* const last = std::partition(first, ids + n, [&](int i) { return bucket(i) == boundary; });
  std::sort(first, last, Before{x});
  int* kept = first;
  for (; kept < last && mass < limit; ++kept) mass += e[*kept];
  return int(kept - ids);
}

}  // namespace

StochasticSampler::StochasticSampler(const SamplingOptions& options)
    : temperature_(options.temperature), top_k_(options.top_k), top_p_(options.top_p), min_p_(options.min_p) {
  assert(temperature_ > 0.0f);
}

void StochasticSampler::distribution(std::span<const float> logits, std::span<float> probs) const {
  assert(probs.size() == logits.size() && !logits.empty());
  const int vocab = int(logits.size());
  Workspace& ws = workspace(logits.size());
  float* x = ws.x.data();
  int* ids = ws.ids.data();

  // Temperature (Hugging Face divides); NaN and +inf are rejected. The divisor in a local and
  // the check as an integer OR, so that the loop vectorises (with the member read through
  // `this`, which x might alias, and a bool OR, it stays scalar; docs/measurements.md, Sampling).
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto invalid = [](float v) { return !(v < kInf); };
  const float temperature = temperature_;
  unsigned any_invalid = 0;
  for (int i = 0; i < vocab; ++i) {
    x[i] = logits[i] / temperature;
    any_invalid |= invalid(x[i]) ? 1u : 0u;
  }
  if (any_invalid != 0) {
    const int i = int(std::find_if(x, x + vocab, invalid) - x);
    SPECULA_CHECK(invalid(logits[i]), "temperature ", temperature_, " is too small: logit ", i, " (", logits[i],
                  ") / temperature overflows a float");
    throw SpeculaError(detail::concat("sampler: logit ", i, " is ", logits[i]));
  }
  const float x_max = x[argmax({x, size_t(vocab)})];
  SPECULA_CHECK(x_max > -kInf, "sampler: every logit is -inf");

  // Softmax numerators (the best one is exp(0) = 1) of the candidates: every token, or with
  // top-k the k best and every other token tied with the k-th.
  int n = vocab;
  double mass = 0.0;
  if (top_k_ > 0 && top_k_ < n) {
    std::iota(ids, ids + vocab, 0);
    std::nth_element(ids, ids + top_k_ - 1, ids + n, Before{x});
    const float kth = x[ids[top_k_ - 1]];
    n = int(std::partition(ids + top_k_, ids + n, [&](int i) { return x[i] >= kth; }) - ids);
    std::fill(probs.begin(), probs.end(), 0.0f);
    for (int r = 0; r < n; ++r) mass += probs[ids[r]] = exp_nonpositive(x[ids[r]] - x_max);
  } else {
    exp_shifted({x, size_t(vocab)}, x_max, probs);
    mass = lane_sum(std::span<const float>(probs));
    if (top_p_ < 1.0f || min_p_ > 0.0f) std::iota(ids, ids + vocab, 0);
  }
  if (top_p_ < 1.0f) {
    const int kept = nucleus(ids, n, x, x_max, probs.data(), double(top_p_) * mass, mass);
    for (int r = kept; r < n; ++r) probs[ids[r]] = 0.0f;
    n = kept;
  }

  // Min-p: probability >= min_p * top probability, i.e. numerator >= min_p * 1.
  if (min_p_ > 0.0f) {
    int kept = 0;
    mass = 0.0;
    for (int r = 0; r < n; ++r) {
      const int i = ids[r];
      if (probs[i] >= min_p_) {
        ids[kept++] = i;
        mass += probs[i];
      } else {
        probs[i] = 0.0f;
      }
    }
    n = kept;
  }

  if (n == vocab) {  // every token kept: one pass over the row, a product that vectorises
    const double scale = 1.0 / mass;
    for (float& q : probs) q = float(q * scale);
  } else {
    for (int r = 0; r < n; ++r) probs[ids[r]] = float(probs[ids[r]] / mass);
  }
}

}  // namespace specula
