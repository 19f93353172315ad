#include "draft/sibling_draw.h"

#include <algorithm>

#include "base/error.h"
#include "verify/residual.h"

namespace specula {
namespace {

// The k most probable tokens with q > 0 other than `exclude`, by descending probability then ascending id.
std::vector<int> top_k(std::span<const float> q, int k, int exclude) {
  std::vector<int> best;  // sorted, at most k entries
  if (k == 0) return best;
  best.reserve(k + 1);
  auto before = [&](int a, int b) { return q[a] > q[b] || (q[a] == q[b] && a < b); };
  for (int v = 0; v < static_cast<int>(q.size()); ++v) {
    if (v == exclude || !(q[v] > 0.0f) || (static_cast<int>(best.size()) == k && !before(v, best.back()))) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), v, before), v);
    if (static_cast<int>(best.size()) > k) best.pop_back();
  }
  return best;
}

}  // namespace

std::vector<int> draw_siblings(std::span<const float> q, int k, SiblingDraw mode, Philox& rng, int exclude) {
  SPECULA_CHECK(k >= 0, "draw_siblings: the number of children must be >= 0, got ", k);
  if (mode == SiblingDraw::kTopK) return top_k(q, k, exclude);
  std::vector<int> children;
  Residual remaining(q);
  if (exclude >= 0) remaining.remove(exclude);
  for (int j = 0; j < k; ++j) {
    const int x = remaining.sample(rng.uniform());
    if (x < 0) break;
    children.push_back(x);
    if (mode == SiblingDraw::kWithoutReplacement) remaining.remove(x);
  }
  return children;
}

}  // namespace specula
