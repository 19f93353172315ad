#include "engine/device_draft.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace specula {

int DraftRounds::rows() const {
  int n = 0;
  for (const RaggedBatch& b : batches) n += b.num_rows();
  return n;
}

int DraftRounds::logit_rows() const {
  int n = 0;
  for (const RaggedBatch& b : batches) n += b.num_logits();
  return n;
}

int DraftRounds::draws() const {
  if (children.empty()) return logit_rows();
  int n = 0;
  for (const int k : children) n += k;
  return n;
}

std::vector<int> DraftRounds::draw_rows() const {
  std::vector<int> rows;
  const int n = logit_rows();
  for (int l = 0; l < n; ++l)
    rows.insert(rows.end(), children.empty() ? 1 : static_cast<std::size_t>(children[static_cast<std::size_t>(l)]), l);
  return rows;
}

int DraftRounds::dynamic_nodes() const {
  return dynamic.on() && !batches.empty() ? batches.front().num_seqs() * dynamic.budget : 0;
}

namespace {

void check_dynamic(const DraftRounds& draft) {
  const DynamicDraft& d = draft.dynamic;
  SPECULA_CHECK(d.budget > 0 && d.width > 0 && d.top_k > 0, "device draft: dynamic trees of budget ", d.budget,
                ", width ", d.width, " and top_k ", d.top_k, "; each must be >= 1");
  const int rounds = dynamic_rounds(d.budget, d.width);
  SPECULA_CHECK(draft.rounds() == rounds, "device draft: dynamic trees of ", d.budget, " nodes taken ", d.width,
                " a batch grow in ", rounds, " rounds, not ", draft.rounds());
  const RaggedBatch& first = draft.batches.front();
  int row = 0;
  for (int r = 0; r < draft.rounds(); ++r) {
    const RaggedBatch& batch = draft.batches[static_cast<std::size_t>(r)];
    SPECULA_CHECK(batch.seqs == first.seqs, "device draft: dynamic round ", r, " has other sequences than round 0");
    const int wanted = r == 0 ? batch.num_seqs() : batch.num_seqs() * d.width;
    SPECULA_CHECK(batch.num_logits() == wanted, "device draft: dynamic round ", r, " has ", batch.num_logits(),
                  " logit rows; it needs ", wanted);
    for (int s = 0; s < batch.num_seqs() && r > 0; ++s) {
      const std::size_t su = static_cast<std::size_t>(s);
      SPECULA_CHECK(batch.row_indptr[su + 1] - batch.row_indptr[su] == d.width, "device draft: dynamic round ", r,
                    " gives sequence ", batch.seqs[su], " ", batch.row_indptr[su + 1] - batch.row_indptr[su],
                    " rows; it needs ", d.width);
      for (int i = batch.row_indptr[su]; i < batch.row_indptr[su + 1]; ++i) {
        const int extra = batch.mask_indptr[static_cast<std::size_t>(i) + 1] - batch.mask_indptr[static_cast<std::size_t>(i)];
        const int node = (r - 1) * d.width + i - batch.row_indptr[su];
        SPECULA_CHECK(extra == node + 1, "device draft: dynamic round ", r, " row ", i, " has room for ", extra,
                      " tree keys; node ", node, " needs ", node + 1);
      }
    }
    for (int i = 0; i < batch.num_rows(); ++i, ++row)
      SPECULA_CHECK(draft.feeds[static_cast<std::size_t>(row)] == -1, "device draft: dynamic round ", r, " row ", i,
                    " is fed draw ", draft.feeds[static_cast<std::size_t>(row)], "; the device writes its token");
  }
  for (std::size_t l = 0; l < draft.children.size(); ++l)
    SPECULA_CHECK(draft.children[l] == d.top_k && draft.child_modes[l] == kDrawTopK, "device draft: dynamic logit row ",
                  l, " draws ", draft.children[l], " children by mode ", draft.child_modes[l], "; it needs ", d.top_k,
                  " by kDrawTopK (2)");
  SPECULA_CHECK(!draft.children.empty(), "device draft: dynamic trees draw children; none are given");
  SPECULA_CHECK(!draft.keep_q, "device draft: dynamic trees keep no q (their children are the top-k)");
}

// first_draw: [logit rows] the first draw of each logit row's round.
void check_controls(const DraftRounds& draft, int vocab, std::span<const int> first_draw) {
  const DraftControls& c = draft.controls;
  const std::size_t logit_rows = first_draw.size();
  SPECULA_CHECK(!draft.dynamic.on(), "device draft: dynamic trees take no logit controls on the device");
  SPECULA_CHECK(c.row_set.size() == logit_rows && c.path_first.size() == logit_rows + 1, "device draft: controls of ",
                c.row_set.size(), " logit rows and ", c.path_first.size(), " path starts for ", logit_rows, " logit rows");
  SPECULA_CHECK(c.path_first.front() == 0 && c.path_first.back() == static_cast<int>(c.path_draws.size()),
                "device draft: controls' paths run from ", c.path_first.front(), " to ", c.path_first.back(),
                ", not from 0 to the ", c.path_draws.size(), " path draws");
  for (std::size_t l = 0; l < logit_rows; ++l) {
    const int set = c.row_set[l];
    SPECULA_CHECK(set >= -1 && set < static_cast<int>(c.sets.size()), "device draft: logit row ", l,
                  " takes control set ", set, "; there are ", c.sets.size());
    SPECULA_CHECK(c.path_first[l] <= c.path_first[l + 1], "device draft: controls' path starts decrease at logit row ", l);
    for (int k = c.path_first[l]; k < c.path_first[l + 1]; ++k) {
      const int d = c.path_draws[static_cast<std::size_t>(k)];
      SPECULA_CHECK(d >= 0 && d < first_draw[l], "device draft: logit row ", l, "'s path holds draw ", d,
                    "; an earlier round's draws are [0, ", first_draw[l], ")");
    }
  }
  for (std::size_t i = 0; i < c.sets.size(); ++i)
    check_path_edits(*c.sets[i], vocab, detail::concat("device draft: control set ", i));
}

}  // namespace

void append_path_nodes(std::span<const int> parents, int context, std::vector<int>& out) {
  const std::size_t start = out.size();
  for (int n = context - 1; n >= 0; n = parents[static_cast<std::size_t>(n)]) out.push_back(n);
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
}

void check_path_edits(const PathEdits& e, int vocab, std::string_view what) {
  for (std::size_t k = 0; k < e.edits.size(); ++k) {
    const TokenEdit& edit = e.edits[k];
    SPECULA_CHECK(edit.token >= 0 && edit.token < vocab && (k == 0 || e.edits[k - 1].token < edit.token) &&
                      edit.count >= 0 && std::isfinite(edit.bias),
                  what, ": edit ", k, " has token ", edit.token, ", count ", edit.count, " and bias ", edit.bias,
                  "; edits need ascending tokens in [0, ", vocab, "), counts >= 0 and finite biases");
  }
  SPECULA_CHECK(std::isfinite(e.repetition) && e.repetition > 0 && std::isfinite(e.frequency) &&
                    std::isfinite(e.presence),
                what, ": penalties ", e.repetition, ", ", e.frequency, " and ", e.presence,
                " must be finite, the repetition penalty > 0");
}

void check_draw_options(const DrawOptions& o, const char* what, int index) {
  SPECULA_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, what, " ", index, ": temperature ", o.temperature,
                " is not finite and >= 0");
  SPECULA_CHECK(o.top_k >= 0, what, " ", index, ": top_k ", o.top_k, " is negative");
  SPECULA_CHECK(o.top_p > 0 && o.top_p <= 1, what, " ", index, ": top_p ", o.top_p, " is outside (0, 1]");
  SPECULA_CHECK(o.min_p >= 0 && o.min_p <= 1, what, " ", index, ": min_p ", o.min_p, " is outside [0, 1]");
}

void check_draft_rounds(const DraftRounds& draft, int vocab) {
  SPECULA_CHECK(vocab > 0, "device draft: vocabulary of ", vocab, " tokens");
  SPECULA_CHECK(draft.plans.size() == draft.batches.size(), "device draft: ", draft.plans.size(), " plans for ",
                draft.batches.size(), " rounds");
  SPECULA_CHECK(static_cast<int>(draft.feeds.size()) == draft.rows(), "device draft: ", draft.feeds.size(),
                " feeds for ", draft.rows(), " rows");
  const int logit_rows = draft.logit_rows();
  SPECULA_CHECK(static_cast<int>(draft.options.size()) == logit_rows, "device draft: ", draft.options.size(),
                " options for ", logit_rows, " logit rows");
  SPECULA_CHECK(draft.children.empty() || static_cast<int>(draft.children.size()) == logit_rows, "device draft: ",
                draft.children.size(), " children counts for ", logit_rows, " logit rows");
  SPECULA_CHECK(draft.child_modes.size() == draft.children.size(), "device draft: ", draft.child_modes.size(),
                " child modes for ", draft.children.size(), " children counts");
  for (std::size_t l = 0; l < draft.children.size(); ++l) {
    SPECULA_CHECK(draft.children[l] >= 0, "device draft: logit row ", l, " has ", draft.children[l], " children");
    const int mode = draft.child_modes[l];
    SPECULA_CHECK(is_draw_mode(mode), "device draft: logit row ", l, " has child mode ", mode,
                  "; the modes are 0, 1 and 2 (kDraw*)");
  }
  const int draws = draft.draws();
  SPECULA_CHECK(static_cast<int>(draft.uniforms.size()) == draws, "device draft: ", draft.uniforms.size(),
                " uniforms for ", draws, " draws");
  int row = 0, logit_row = 0, drawn_before = 0;
  std::vector<int> first_draw;  // [logit rows] the first draw of each logit row's round
  for (int r = 0; r < draft.rounds(); ++r) {
    const RaggedBatch& batch = draft.batches[static_cast<std::size_t>(r)];
    SPECULA_CHECK(static_cast<int>(draft.plans[static_cast<std::size_t>(r)].row_slots.size()) == batch.num_rows(),
                  "device draft: round ", r, "'s plan has ", draft.plans[static_cast<std::size_t>(r)].row_slots.size(),
                  " slots for ", batch.num_rows(), " rows");
    for (int i = 0; i < batch.num_rows(); ++i, ++row) {
      const int feed = draft.feeds[static_cast<std::size_t>(row)];
      SPECULA_CHECK(feed >= -1 && feed < drawn_before, "device draft: round ", r, " row ", i, " is fed draw ", feed,
                    "; an earlier round's draws are [0, ", drawn_before, ")");
    }
    first_draw.insert(first_draw.end(), static_cast<std::size_t>(batch.num_logits()), drawn_before);
    for (int l = 0; l < batch.num_logits(); ++l, ++logit_row)
      drawn_before += draft.children.empty() ? 1 : draft.children[static_cast<std::size_t>(logit_row)];
  }
  for (int l = 0; l < logit_rows; ++l)
    check_draw_options(draft.options[static_cast<std::size_t>(l)], "device draft: logit row", l);
  for (int d = 0; d < draws; ++d) {
    const double u = draft.uniforms[static_cast<std::size_t>(d)];
    SPECULA_CHECK(u >= 0 && u < 1, "device draft: draw ", d, ": uniform ", u, " is outside [0, 1)");
  }
  if (draft.controls.on() || !draft.controls.path_first.empty() || !draft.controls.sets.empty())
    check_controls(draft, vocab, first_draw);
  if (draft.dynamic.on() || draft.dynamic.width != 0 || draft.dynamic.top_k != 0) check_dynamic(draft);
}

}  // namespace specula
