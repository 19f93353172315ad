// defines: DrawOptions (the sampling chain of one draw, as plain numbers), DraftControls (logit
// controls over paths drawn on the device), DraftRounds (draft
// forwards a backend runs back to back on its device, every logit row's token drawn there and
// fed to a later round's row without the host: Backend::forward_draft), and their check;
// DeviceDraws, the draws of such rounds left on the device for the target's verification
// (Backend::enqueue_draft). The caller plans every round's slots before the first runs
// (ForwardContext::run_chains).
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/batch.h"
#include "kv/kv_plan.h"
#include "sampling/logit_controls.h"

namespace specula {

// A child that is not there (Backend::forward_draft's tokens): its context's distribution ran
// out of tokens before it (draw_siblings would have returned fewer children), or its parent is
// absent. Fed to a later round as a valid token whose rows nothing reads.
inline constexpr int kAbsentDraw = -2;

// sampling/'s chain over a logit row (temperature, then top-k when top_k > 0, top-p when
// top_p < 1, min-p when min_p > 0); temperature 0 is greedy: one-hot at the first index of the
// largest logit.
struct DrawOptions {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  float min_p = 0;
  bool greedy() const { return temperature == 0; }
};

// How the children of a context were drawn: the values of verify/token_tree.h's SiblingDraw.
inline constexpr int kDrawSampled = 0;             // i.i.d. from q
inline constexpr int kDrawWithoutReplacement = 1;  // from q without the earlier siblings
inline constexpr int kDrawTopK = 2;                // deterministic distinct proposals
inline constexpr bool is_draw_mode(int code) {
  return code == kDrawSampled || code == kDrawWithoutReplacement || code == kDrawTopK;
}

// Logit rows are numbered in round order, then row order within a round; so are draws. Each
// logit row's distribution is its DrawOptions' chain. Without `children`, each logit row gives
// one draw under its options (greedy: the argmax). With them, logit row l gives children[l]
// draws from its distribution by child_modes[l] (draw_siblings: i.i.d., without replacement,
// or its top-k), a draw the distribution cannot give being kAbsentDraw. Round r's row i (rows
// numbered across rounds in order) takes as its token the token of draw feeds[i], which
// belongs to an earlier round; -1 keeps the batch's own token.
// Dynamic trees grown on the device (DraftRounds::dynamic), draw_tree/tree_growth.h's
// best-first expansion: each sequence's root context pushes the top_k children of its
// distribution (score: the log of their probability), and after every round the `width` best
// candidates not yet taken (score, then push order) become the next nodes, up to `budget` in
// all; round r > 0 feeds the nodes of the r-th such batch, whose children (score: the parent's
// plus the log of theirs) are pushed in node order. A slot left without a candidate is
// kAbsentDraw. The rounds are the root's, then one per batch but the last:
// dynamic_rounds(budget, width).
struct DynamicDraft {
  int budget = 0;  // nodes a tree has (0: no dynamic trees)
  int width = 0;   // nodes a batch takes
  int top_k = 0;   // children a context pushes
  bool on() const { return budget > 0; }
  // Candidates a tree pushes: the root's top_k, then top_k for each node a round feeds.
  int pool_cap() const;
};
// The rounds of dynamic trees of `budget` nodes taken `width` a batch: ceil(budget / width).
inline int dynamic_rounds(int budget, int width) { return (budget + width - 1) / width; }
inline int DynamicDraft::pool_cap() const { return (1 + (dynamic_rounds(budget, width) - 1) * width) * top_k; }

// Logit controls of draft rows whose paths the device draws: logit row l's logits are edited
// by *sets[row_set[l]] (-1: not edited) over its path, the tokens of the draws
// path_draws[path_first[l], path_first[l + 1]) (root first; a path of absent draws is never
// read), before its distribution. The sets are the caller's, alive through the call.
struct DraftControls {
  std::vector<const PathEdits*> sets;
  std::vector<int> row_set;     // [logit rows] or empty (no controls)
  std::vector<int> path_first;  // [logit rows + 1] where row_set is given
  std::vector<int> path_draws;  // [path_first.back()]
  bool on() const { return !row_set.empty(); }
};

struct DraftRounds {
  std::vector<RaggedBatch> batches;  // [rounds]
  std::vector<KvPlan> plans;         // [rounds] each batch's plan, prepared in round order
  std::vector<int> feeds;            // [rows of every round]
  std::vector<DrawOptions> options;  // [logit rows]
  std::vector<int> children;         // [logit rows] or empty (one draw each)
  std::vector<int> child_modes;      // [logit rows] kDraw* codes where children is given, else empty
  std::vector<double> uniforms;      // [draws] each draw's inverse-CDF uniform (unread where greedy or kDrawTopK)
  bool keep_q = false;               // every logit row's distribution comes back
  DraftControls controls;
  // Where on: every round's sequences are the first round's, in its order; round 0 gives one
  // logit row a sequence (its root), each later round `width` rows a sequence, all with logits,
  // whose tokens, positions and tree masks the device writes (the batch's are placeholders:
  // each row under every earlier one of its sequence's tree, so that its mask has room for
  // any ancestry); every logit row draws top_k children by kDrawTopK (the candidates, never
  // fed: feeds -1). Each sequence's nodes come back, not the draws (forward_draft).
  DynamicDraft dynamic;

  int rounds() const { return static_cast<int>(batches.size()); }
  int rows() const;
  int logit_rows() const;
  int draws() const;
  std::vector<int> draw_rows() const;  // [draws] the logit row each draw is drawn from
  int dynamic_nodes() const;           // dynamic: sequences x budget, else 0
};

// Throws SpeculaError naming the round, row or draw unless `draft` is well formed for a model of
// `vocab` tokens: a plan per batch (its row slots one per row), feeds of an earlier round's
// draw or -1 (every row of the first round -1), options in range (temperature finite and >= 0,
// top_k >= 0, top_p in (0, 1], min_p in [0, 1]), children >= 0 with a kDraw* mode each,
// uniforms in [0, 1); controls with a set (edits ascending within the vocabulary, penalties
// finite) or -1 per logit row and paths of draws of earlier rounds, none for dynamic trees;
// dynamic rounds as DraftRounds::dynamic says.
void check_draft_rounds(const DraftRounds& draft, int vocab);

// Appends the nodes of context `context`'s path (0 the root, 1 + n after node n) to `out`, from
// the root's child down to node n; `parents`: each node's, -1 the root.
void append_path_nodes(std::span<const int> parents, int context, std::vector<int>& out);

// Throws SpeculaError naming `what` unless `e` suits a vocabulary of `vocab` tokens: edits of
// ascending tokens in [0, vocab) with counts >= 0 and finite biases; finite penalties, the
// repetition penalty > 0.
void check_path_edits(const PathEdits& e, int vocab, std::string_view what);

// Throws SpeculaError naming `what` and `index` (e.g. "device draft: logit row", 3) unless `o`
// is in range: temperature finite and >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1].
void check_draw_options(const DrawOptions& o, const char* what, int index);

// The draws of rounds enqueued on a device and not read back (Backend::enqueue_draft): each
// draw's token and, where the rounds kept q, the distributions stay on the device, where a
// forward_verify of the same device reads them (DeviceVerify::draws; a node's q row is the one
// its draw came from). Of dynamic trees (DraftRounds::dynamic) what stays is each sequence's
// nodes, their tokens and parents: draw s * tree_budget() + i is node i of sequence s. They
// stay valid until the next forward_draft or enqueue_draft on the workspace that drew them; a
// forward_verify that reads them later is refused.
class DeviceDraws {
 public:
  virtual ~DeviceDraws() = default;
  virtual int draws() const = 0;
  virtual bool keeps_q() const = 0;
  // The nodes of each dynamic tree; 0 unless the rounds grew dynamic trees.
  virtual int tree_budget() const = 0;
  // Each round's device time in seconds; readable once a forward_verify that read these draws
  // has returned.
  virtual std::vector<double> round_seconds() const = 0;
};

}  // namespace specula
