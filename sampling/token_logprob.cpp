#include "sampling/token_logprob.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"

namespace specula {

TokenLogprob token_logprob(LogprobSource source, std::span<const float> row, int token, int top_n) {
  const int vocab = static_cast<int>(row.size());
  SPECULA_CHECK(token >= 0 && token < vocab, "logprobs: token ", token, " outside the vocabulary [0, ", vocab, ")");
  SPECULA_CHECK(top_n >= 0 && top_n <= kMaxLogprobs, "logprobs: ", top_n, " alternatives asked, at most ", kMaxLogprobs);
  // log_of(v): the log-probability of entry v.
  double offset = 0;
  if (source == LogprobSource::kRaw) {
    const float max = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float x : row) sum += std::exp(double(x) - double(max));
    offset = double(max) + std::log(sum);
  }
  const auto log_of = [&](int v) {
    const double x = row[static_cast<std::size_t>(v)];
    if (source == LogprobSource::kRaw) return x - offset;
    return x > 0 ? std::log(x) : -std::numeric_limits<double>::infinity();
  };
  TokenLogprob out{token, log_of(token), {}};
  if (top_n == 0) return out;
  std::vector<int> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int n = std::min(top_n, vocab);
  const auto before = [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + n, order.end(), before);
  for (int i = 0; i < n; ++i) {
    const int v = order[static_cast<std::size_t>(i)];
    if (source == LogprobSource::kProcessed && row[v] <= 0) break;  // outside the kept set
    out.top.emplace_back(v, log_of(v));
  }
  return out;
}

}  // namespace specula
