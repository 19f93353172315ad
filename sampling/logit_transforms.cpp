#include "sampling/logit_transforms.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "base/exp_shifted.h"
#include "base/lane_sum.h"
#include "sampling/sampler.h"

namespace specula {

// One row as the transforms narrow it.  The candidates are every token in id order until a
// transform lists them in ids[0, n).  The candidates' softmax numerators exp(x - x_max) (0
// for every other token, in the output row) and their sum are computed when first read; a
// transform that changes the scores or selects by them drops them.
struct Candidates {
  std::span<const float> x;  // [vocab] scores: the logits until Temperature writes `scaled`
  float* scaled;             // [vocab] scratch for the divided scores
  int* ids;                  // [vocab] scratch for the listed candidates
  int n;                     // how many candidates
  bool listed = false;
  std::span<float> e;  // [vocab] the output row: the numerators once has_numerators
  bool has_numerators = false;
  float x_max = 0.0f;  // the largest score, set with the numerators
  double mass = 0.0;   // the candidates' numerators summed

  // The candidates' ids, listed in id order first if no transform has listed them.
  int* list() {
    if (!listed) std::iota(ids, ids + n, 0);
    listed = true;
    return ids;
  }

  // Computes the numerators and their sum unless they are current: every listed candidate's
  // in list order, or the whole row's in lanes (exp_shifted, lane_sum).
  void numerators() {
    if (has_numerators) return;
    x_max = x[argmax(x)];
    SPECULA_CHECK(x_max > -std::numeric_limits<float>::infinity(), "sampler: every logit is -inf");
    if (listed) {
      std::fill(e.begin(), e.end(), 0.0f);
      mass = 0.0;
      for (int r = 0; r < n; ++r) mass += e[ids[r]] = exp_nonpositive(x[ids[r]] - x_max);
    } else {
      exp_shifted(x, x_max, e);
      mass = lane_sum(std::span<const float>(e));
    }
    has_numerators = true;
  }
};

namespace {

// Per-thread scratch, so chain_distribution stays allocation-free after warm-up.
struct Workspace {
  std::vector<float> x;  // [vocab] divided scores
  std::vector<int> ids;  // [vocab] candidate token ids; the kept set is a prefix
};

Workspace& workspace(size_t vocab) {
  thread_local Workspace ws;
  ws.x.resize(vocab);
  ws.ids.resize(vocab);
  return ws;
}

// Candidate order: larger score first, ties to the lower token id.
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
//   ids: in/out [n]; x: in [vocab] scores, max x_max; e: in [vocab] numerators
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

void Temperature::apply(Candidates& row) const {
  // The divisor in a local and the check an integer OR, so that the loop vectorises (with
  // the member read through `this`, which `out` might alias, and a bool OR, it stays
  // scalar; docs/measurements.md, Sampling).
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto invalid = [](float v) { return !(v < kInf); };
  const float divisor = t;
  const float* in = row.x.data();
  float* out = row.scaled;
  const int vocab = int(row.x.size());
  unsigned any_invalid = 0;
  for (int i = 0; i < vocab; ++i) {
    out[i] = in[i] / divisor;
    any_invalid |= invalid(out[i]) ? 1u : 0u;
  }
  if (any_invalid != 0) {
    const int i = int(std::find_if(out, out + vocab, invalid) - out);
    SPECULA_CHECK(invalid(in[i]), "temperature ", t, " is too small: logit ", i, " (", in[i],
                  ") / temperature overflows a float");
    throw SpeculaError(detail::concat("sampler: logit ", i, " is ", in[i]));
  }
  row.x = {out, row.x.size()};
  row.has_numerators = false;
}

void TopK::apply(Candidates& row) const {
  if (k >= row.n) return;
  int* ids = row.list();
  const float* x = row.x.data();
  std::nth_element(ids, ids + k - 1, ids + row.n, Before{x});
  const float kth = x[ids[k - 1]];
  row.n = int(std::partition(ids + k, ids + row.n, [&](int i) { return x[i] >= kth; }) - ids);
  row.has_numerators = false;
}

void TopP::apply(Candidates& row) const {
  row.numerators();
  int* ids = row.list();
  const int kept = nucleus(ids, row.n, row.x.data(), row.x_max, row.e.data(), double(p) * row.mass, row.mass);
  for (int r = kept; r < row.n; ++r) row.e[ids[r]] = 0.0f;
  row.n = kept;
}

void MinP::apply(Candidates& row) const {
  // The top token's numerator is exp(0) = 1, so the bound on numerators is p itself.
  // Locals, so that the stores to ids and e reload neither row.n nor p.
  row.numerators();
  int* ids = row.list();
  float* e = row.e.data();
  const int n = row.n;
  const float bound = p;
  int kept = 0;
  double mass = 0.0;
  for (int r = 0; r < n; ++r) {
    const int i = ids[r];
    if (e[i] >= bound) {
      ids[kept++] = i;
      mass += e[i];
    } else {
      e[i] = 0.0f;
    }
  }
  row.n = kept;
  row.mass = mass;
}

std::vector<LogitTransform> transform_chain(const SamplingOptions& options) {
  assert(options.temperature > 0.0f);
  std::vector<LogitTransform> chain = {Temperature{options.temperature}};
  if (options.top_k > 0) chain.push_back(TopK{options.top_k});
  if (options.top_p < 1.0f) chain.push_back(TopP{options.top_p});
  if (options.min_p > 0.0f) chain.push_back(MinP{options.min_p});
  return chain;
}

void chain_distribution(std::span<const LogitTransform> chain, std::span<const float> logits, std::span<float> probs) {
  assert(probs.size() == logits.size() && !logits.empty());
  Workspace& ws = workspace(logits.size());
  Candidates row{.x = logits, .scaled = ws.x.data(), .ids = ws.ids.data(), .n = int(logits.size()), .e = probs};
  for (const LogitTransform& transform : chain) std::visit([&](const auto& step) { step.apply(row); }, transform);
  row.numerators();
  if (row.n == int(logits.size())) {  // every token kept: one pass over the row, a product that vectorises
    const double scale = 1.0 / row.mass;
    for (float& q : probs) q = float(q * scale);
  } else {
    for (int r = 0; r < row.n; ++r) probs[row.ids[r]] = float(probs[row.ids[r]] / row.mass);
  }
}

}  // namespace specula
