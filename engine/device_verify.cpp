#include "engine/device_verify.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"

namespace specula {

int first_logit_row(const RaggedBatch& batch, int part) {
  const int first_row = batch.row_indptr[static_cast<std::size_t>(part)];
  return static_cast<int>(std::lower_bound(batch.logit_rows.begin(), batch.logit_rows.end(), first_row) -
                          batch.logit_rows.begin());
}

namespace {

template <class Where>
void check_edits(const DeviceVerify& v, int n, int vocab, const Where& where) {
  if (v.path_edits != nullptr) {
    SPECULA_CHECK(v.edit_first.empty() && v.draws != nullptr && v.draws->tree_budget() == 0, where(),
                  "path edits take draws of a chain or static tree and no host edits");
    return check_path_edits(*v.path_edits, vocab, where() + "path edits");
  }
  if (v.edit_first.empty()) {
    SPECULA_CHECK(v.edits.empty(), where(), v.edits.size(), " edits given without edit_first");
    return;
  }
  SPECULA_CHECK(!v.draws, where(), "logit edits take the tree's tokens; a tree of draws has none on the host");
  SPECULA_CHECK(static_cast<int>(v.edit_first.size()) == n + 2, where(), "edit_first has ", v.edit_first.size(),
                " entries; need ", n + 2);
  SPECULA_CHECK(v.edit_first.front() == 0 && v.edit_first.back() == static_cast<int>(v.edits.size()), where(),
                "edit_first runs from ", v.edit_first.front(), " to ", v.edit_first.back(), ", not from 0 to the ",
                v.edits.size(), " edits");
  for (int c = 0; c <= n; ++c) {
    const int first = v.edit_first[static_cast<std::size_t>(c)], end = v.edit_first[static_cast<std::size_t>(c) + 1];
    SPECULA_CHECK(first <= end, where(), "edit_first decreases at context ", c);
    for (int k = first; k < end; ++k) {
      const TokenEdit& e = v.edits[static_cast<std::size_t>(k)];
      SPECULA_CHECK(e.token >= 0 && e.token < vocab, where(), "edit ", k, " of context ", c, ": token ", e.token,
                    " is outside [0, ", vocab, ")");
      SPECULA_CHECK(k == first || v.edits[static_cast<std::size_t>(k) - 1].token < e.token, where(), "edit ", k,
                    " of context ", c, ": token ", e.token, " is not above the previous edit's");
      SPECULA_CHECK(e.count >= 0, where(), "edit ", k, " of context ", c, ": count ", e.count, " is negative");
      SPECULA_CHECK(std::isfinite(e.bias), where(), "edit ", k, " of context ", c, ": bias ", e.bias,
                    " is not finite");
    }
  }
  for (const float penalty : {v.repetition_penalty, v.frequency_penalty, v.presence_penalty})
    SPECULA_CHECK(std::isfinite(penalty), where(), "penalty ", penalty, " is not finite");
}

}  // namespace

void check_device_verify(const RaggedBatch& batch, std::span<const DeviceVerify> verify, int vocab) {
  std::vector<char> taken(static_cast<std::size_t>(batch.num_seqs()), 0);
  for (std::size_t i = 0; i < verify.size(); ++i) {
    const DeviceVerify& v = verify[i];
    const auto where = [i] { return detail::concat("device verification: entry ", i, ": "); };
    SPECULA_CHECK(v.part >= 0 && v.part < batch.num_seqs(), where(), "part ", v.part, " is outside the batch's ",
                  batch.num_seqs(), " sequences");
    SPECULA_CHECK(!taken[static_cast<std::size_t>(v.part)], where(), "part ", v.part, " is verified twice");
    taken[static_cast<std::size_t>(v.part)] = 1;
    const int n = static_cast<int>(v.tokens.size());
    const int rows = batch.span_rows(v.part);
    SPECULA_CHECK(rows == n + 1, where(), "part ", v.part, " has ", rows, " rows; a tree of ", n, " nodes needs ",
                  n + 1);
    const int first = first_logit_row(batch, v.part);
    const int start = batch.row_indptr[static_cast<std::size_t>(v.part)];
    SPECULA_CHECK(first + rows <= batch.num_logits() &&
                      batch.logit_rows[static_cast<std::size_t>(first)] == start &&
                      batch.logit_rows[static_cast<std::size_t>(first + rows - 1)] == start + rows - 1,
                  where(), "part ", v.part, " must return the logits of every row");
    SPECULA_CHECK(v.parents.size() == v.tokens.size(), where(), "parents has ", v.parents.size(), " entries for ", n,
                  " nodes");
    for (int j = 0; j < n; ++j) {
      const int t = v.tokens[static_cast<std::size_t>(j)], p = v.parents[static_cast<std::size_t>(j)];
      SPECULA_CHECK(t >= 0 && t < vocab, where(), "token ", t, " of node ", j, " is outside [0, ", vocab, ")");
      SPECULA_CHECK(p >= -1 && p < j, where(), "parent ", p, " of node ", j, " is not in [-1, ", j, ")");
    }
    if (v.draws) {
      SPECULA_CHECK(static_cast<int>(v.node_draws.size()) == n, where(), "node_draws has ", v.node_draws.size(),
                    " entries for ", n, " nodes");
      for (const int d : v.node_draws)
        SPECULA_CHECK(d >= 0 && d < v.draws->draws(), where(), "draw ", d, " is outside the draws' [0, ",
                      v.draws->draws(), ")");
      SPECULA_CHECK(v.q.empty(), where(), "a tree of draws takes q from its draws, not from q");
      if (const int budget = v.draws->tree_budget(); budget > 0) {
        SPECULA_CHECK(n == budget && v.node_draws[0] % budget == 0, where(), "a dynamic tree's ", n,
                      " nodes are not the whole tree of draws from ", v.node_draws[0], " of budget ", budget);
        for (int j = 0; j < n; ++j) {
          SPECULA_CHECK(v.node_draws[static_cast<std::size_t>(j)] == v.node_draws[0] + j, where(), "node ", j,
                        " of a dynamic tree is draw ", v.node_draws[static_cast<std::size_t>(j)], ", not ",
                        v.node_draws[0] + j);
          SPECULA_CHECK(v.parents[static_cast<std::size_t>(j)] == j - 1, where(), "node ", j,
                        " of a dynamic tree has placeholder parent ", v.parents[static_cast<std::size_t>(j)],
                        ", not the chain's ", j - 1);
        }
        SPECULA_CHECK(v.rule != kRuleBlock, where(), "block verification takes a chain; a dynamic tree of draws is none");
      }
    } else {
      SPECULA_CHECK(v.node_draws.empty(), where(), "node_draws given without draws");
    }
    SPECULA_CHECK(std::isfinite(v.temperature) && v.temperature >= 0, where(), "temperature ", v.temperature,
                  " is not finite and >= 0");
    SPECULA_CHECK(v.top_k >= 0, where(), "top_k ", v.top_k, " is negative");
    SPECULA_CHECK(v.top_p > 0 && v.top_p <= 1, where(), "top_p ", v.top_p, " is outside (0, 1]");
    SPECULA_CHECK(v.min_p >= 0 && v.min_p <= 1, where(), "min_p ", v.min_p, " is outside [0, 1]");
    SPECULA_CHECK(v.logprob_top >= -1 && v.logprob_top <= kMaxDeviceLogprobs, where(), "logprob_top ", v.logprob_top,
                  " is outside [-1, ", kMaxDeviceLogprobs, "]");
    SPECULA_CHECK(v.logprob_source == kLogprobRaw || v.logprob_source == kLogprobProcessed, where(),
                  "logprob source code ", v.logprob_source, " is not 0 or 1");
    check_edits(v, n, vocab, where);
    SPECULA_CHECK(v.rule == kRuleToken || v.rule == kRuleBlock || v.rule == kRuleTraversal, where(), "rule code ",
                  v.rule, " is not 0, 1 or 2");
    SPECULA_CHECK(v.rule == kRuleToken || !v.greedy(), where(), "rule ", v.rule,
                  " verifies sampled trees; a greedy one (temperature 0) has one rule");
    if (v.rule == kRuleBlock) {
      for (int j = 0; j < n; ++j)
        SPECULA_CHECK(v.parents[static_cast<std::size_t>(j)] == j - 1, where(), "block verification takes a chain; node ",
                      j, " has parent ", v.parents[static_cast<std::size_t>(j)]);
    }
    if (v.greedy()) continue;
    SPECULA_CHECK(static_cast<int>(v.draw.size()) == n + 1, where(), "draw has ", v.draw.size(), " codes; need ",
                  n + 1);
    SPECULA_CHECK(static_cast<int>(v.uniforms.size()) == 2 * n + 1, where(), "uniforms has ", v.uniforms.size(),
                  " entries; need ", 2 * n + 1);
    for (const double u : v.uniforms)
      SPECULA_CHECK(u >= 0 && u < 1, where(), "uniform ", u, " is outside [0, 1)");
    const std::size_t q_size = static_cast<std::size_t>(n + 1) * static_cast<std::size_t>(vocab);
    SPECULA_CHECK(v.q.empty() || v.q.size() == q_size, where(), "q holds ", v.q.size(), " floats; need 0 or ", q_size);
    std::vector<char> has_children(static_cast<std::size_t>(n + 1), 0);
    for (const int p : v.parents) has_children[static_cast<std::size_t>(p + 1)] = 1;
    for (int c = 0; c <= n; ++c) {
      const int code = v.draw[static_cast<std::size_t>(c)];
      SPECULA_CHECK(is_draw_mode(code), where(), "draw code ", code, " of context ", c, " is not 0, 1 or 2");
      SPECULA_CHECK(!v.draws || v.draws->tree_budget() == 0 || code == kDrawTopK, where(), "context ", c,
                    " of a dynamic tree has draw code ", code, "; its children are the top-k (2)");
      const bool q_held = v.draws ? v.draws->keeps_q() : !v.q.empty();
      SPECULA_CHECK(q_held || !has_children[static_cast<std::size_t>(c)] || code == kDrawTopK, where(), "context ", c,
                    " has children drawn from q, and ", v.draws ? "the draws keep none" : "q is empty");
    }
  }
}

}  // namespace specula
