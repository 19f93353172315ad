// defines: DraftUpload and pack_draft, the host half of drafting on the device
// (Backend::forward_draft on the CUDA backend), CUDA-free so that the CPU suite tests it: every
// round's step upload (pack_step), the rows' feeds, the logit rows' options (and children),
// the draws' uniforms in one upload, and where the kernels' outputs (the drawn tokens, the
// distributions) sit after it; and append_draw_options, the sampling chains' arrays of an
// upload (pack_draft's, and the Medusa heads' draws in medusa_cuda.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/cuda/cuda_plan.h"
#include "engine/device_draft.h"

namespace specula::cuda {

// One candidate of a dynamic tree (DraftRounds::dynamic) in the device's pool: pushed in order,
// taken at most once.
struct DynamicCandidate {
  double score;  // cumulative log draft probability of its path
  int parent;    // its parent node (-1: the root)
  int token;
  int depth;     // its depth as a node (1: a child of the root)
  int taken;     // 1 once a node
};

// Byte offsets are into one device buffer: the outputs, then the upload [upload_at,
// upload_at + upload_bytes) with round 0's step last, so that a later round's offsets do not
// depend on how many rows the first round (the catch-up) has.
// Where append_draw_options put each row's sampling chain in an upload (bytes from its start).
struct DrawOptionsAt {
  std::size_t temperature = 0, top_k = 0, top_p = 0, min_p = 0;
};
// Appends the rows' temperature, top_k, top_p and min_p as four arrays of [rows]
// (append_aligned, in that order).
DrawOptionsAt append_draw_options(std::vector<unsigned char>& data, std::span<const DrawOptions> options);

// Appends `e`'s edits and EOS ids to an upload whose first byte sits `upload_at` bytes into its
// device buffer; returns a row reading them under e's penalties and EOS bound, with no path.
PathEditRow append_path_edits(std::vector<unsigned char>& data, const PathEdits& e, std::size_t upload_at);

// Appends the edits and EOS ids of `controls`' sets (once each) and every logit row's path (its
// draws) to an upload whose first byte sits `upload_at` bytes into its device buffer; returns
// each logit row's PathEditRow (a row without a set edits nothing).
std::vector<PathEditRow> append_edit_rows(std::vector<unsigned char>& data, const DraftControls& controls,
                                          std::size_t upload_at);

struct DraftUpload {
  std::vector<StepUpload> steps;       // [rounds] each round's step upload
  std::vector<std::size_t> step_at;    // [rounds] where each sits (bytes, kAlign-aligned)
  std::vector<int> first_row;          // [rounds + 1] each round's first row, across rounds
  std::vector<int> first_logit;        // [rounds + 1] each round's first logit row
  std::vector<int> first_draw;         // [rounds + 1] each round's first draw
  bool children = false;               // DraftRounds::children given: the children kernel draws
  bool controls = false;               // DraftRounds::controls given: the edit kernel edits
  struct Offsets {
    std::size_t feeds = 0;                        // [rows from round 1 on] int, DraftRounds::feeds
    std::size_t temperature = 0, top_p = 0, min_p = 0;  // [logit rows] float
    std::size_t top_k = 0;                        // [logit rows] int
    std::size_t child_first = 0;                  // [logit rows + 1] int, each logit row's first draw (children)
    std::size_t child_modes = 0;                  // [logit rows] int, kDraw* (children)
    std::size_t sources = 0;                      // [logit rows] int, the draw its row was fed, -1 (children)
    std::size_t uniforms = 0;                     // [draws] double
    std::size_t edit_rows = 0;                    // [logit rows] PathEditRow (controls; what they read: last)
    std::size_t tokens = 0;                       // [draws] int, drawn (-1: a refused row; kAbsentDraw)
    std::size_t probs = 0;                        // [probs_rows, vocab] float, the logit rows' distributions
    // Dynamic trees: each sequence's nodes (tokens and parents come back) and candidates.
    std::size_t node_tokens = 0, node_parents = 0, node_depth = 0;  // [sequences, budget] int
    std::size_t node_score = 0;                   // [sequences, budget] double
    std::size_t pool = 0;                         // [sequences, pool_cap] DynamicCandidate
    std::size_t pool_size = 0;                    // [sequences] int
  } at;
  DynamicDraft dynamic;                // DraftRounds::dynamic
  int sequences = 0;                   // dynamic: the sequences of every round
  int pool_cap = 0;                    // dynamic: candidates a sequence may push
  // Rows of the probs output: every logit row's when q comes back, else one round's (each
  // round's logit rows reuse them).
  int probs_rows = 0;
  std::vector<unsigned char> data;     // the upload, [upload_bytes]
  std::size_t upload_at = 0, upload_bytes = 0, device_bytes = 0;

  // Where round r's distributions go in the probs output (rows).
  int probs_row(int round, bool keep_q) const { return keep_q ? first_logit[static_cast<std::size_t>(round)] : 0; }
  // Where the feeds of round `round` (> 0) begin (bytes).
  std::size_t feeds_of(int round) const;
  // Everything round `round`'s kernels are launched with beside the buffer's address: equal
  // shapes replay one captured graph.
  std::vector<std::size_t> round_shape(int round, bool keep_q) const;
};

// The upload of `draft` (check_draft_rounds first) for a model of `vocab` tokens with sliding
// `window` (0: none) into the device pages numbered `pages_id`.
DraftUpload pack_draft(const DraftRounds& draft, int vocab, int window, const CudaOptions& options,
                       std::uint64_t pages_id);

}  // namespace specula::cuda
