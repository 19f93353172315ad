#include "engine/device_draft.h"

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

}  // namespace

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
    for (int l = 0; l < batch.num_logits(); ++l, ++logit_row)
      drawn_before += draft.children.empty() ? 1 : draft.children[static_cast<std::size_t>(logit_row)];
  }
  for (int l = 0; l < logit_rows; ++l)
    check_draw_options(draft.options[static_cast<std::size_t>(l)], "device draft: logit row", l);
  for (int d = 0; d < draws; ++d) {
    const double u = draft.uniforms[static_cast<std::size_t>(d)];
    SPECULA_CHECK(u >= 0 && u < 1, "device draft: draw ", d, ": uniform ", u, " is outside [0, 1)");
  }
  if (draft.dynamic.on() || draft.dynamic.width != 0 || draft.dynamic.top_k != 0) check_dynamic(draft);
}

}  // namespace specula
