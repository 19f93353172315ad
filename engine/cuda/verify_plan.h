// defines: VerifyUpload and pack_verify, the host half of verification on the device
// (Backend::forward_verify on the CUDA backend), CUDA-free so that the CPU suite tests it: the
// verified sequences split into a greedy and a stochastic batch of verify_tree.h's flat layout,
// their contexts' sampling options, uniforms and q in one upload, the runs of logit rows the
// sampling kernel reads and of those that still go to the host, and where each sequence's
// verdict lands in the one buffer that comes back (unpack_verdicts).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/batch.h"
#include "engine/device_verify.h"

namespace specula::cuda {

// One emitted token's log-probability and its alternatives (DeviceVerify::logprob_top), as the
// log-probability kernel writes them: alternatives past those asked, or past a processed
// distribution's support, are token -1.
struct EmittedLogprob {
  double logprob;
  double top_logprob[kMaxDeviceLogprobs];
  int top_token[kMaxDeviceLogprobs];
};

// Greedy sequences come first, then stochastic ones, in the order of `verify`; their nodes and
// contexts likewise. Byte offsets are into one device buffer: the upload [0, upload_bytes),
// then the kernels' outputs and scratch.
struct VerifyUpload {
  int greedy = 0, stochastic = 0;                 // sequences of each batch
  int greedy_nodes = 0, nodes = 0;                // nodes of the greedy batch, of both
  int greedy_contexts = 0, contexts = 0;          // contexts (n + 1 per sequence) likewise
  std::vector<unsigned char> data;                // the upload and the edits, [upload_bytes + edit_bytes]
  struct Offsets {
    std::size_t greedy_indptr = 0;      // [greedy + 1] int
    std::size_t stochastic_indptr = 0;  // [stochastic + 1] int, from 0 within the stochastic batch
    std::size_t tokens = 0, parents = 0;  // [nodes] int (parents local to their sequence)
    std::size_t draw = 0;               // [stochastic contexts] int, kDraw* codes
    std::size_t rule = 0;               // [stochastic] int, kRule* codes (DeviceVerify::rule)
    std::size_t scratch_first = 0;      // [stochastic] int64, each sequence's first scratch double (verify_tree.h)
    std::size_t top_k = 0;              // [contexts] int
    std::size_t temperature = 0, top_p = 0, min_p = 0;  // [contexts] float (greedy contexts: temperature 0)
    std::size_t draw_uniforms = 0;      // [contexts] double, zeros: the sampling kernel's draws mark refused rows
    std::size_t uniforms = 0;           // [2 stochastic nodes + stochastic] double
    std::size_t q = 0;                  // [stochastic contexts, vocab] float (zeros where a sequence has none)
    std::size_t probs = 0;              // [contexts, vocab] float, the sampling kernel's output
    std::size_t scratch = 0;            // double, the stochastic kernel's workspace: each sequence's levels
    std::size_t result = 0;             // [result_ints()] int, what comes back
    // Log-probabilities (where any entry asks): each context slot's sequence, [contexts] int;
    // each sequence's source (-1: none), alternatives and firsts (context, node, logit row),
    // [sequences] int, [sequences, 3] int; the kernel's output, [contexts] EmittedLogprob, which
    // comes back too.
    std::size_t logprob_sequence = 0, logprob_source = 0, logprob_top = 0, logprob_first = 0, logprobs = 0;
    // Logit controls (where any entry has edits or path edits): each context's PathEditRow,
    // [contexts]; the edited rows the sampling kernel reads, [contexts, vocab] float; what the
    // rows read (edits, EOS ids, paths), [edit_bytes], last of all.
    std::size_t edit_rows = 0, edited = 0, edits = 0;
  } at;
  bool logprobs = false;                          // an entry asks for log-probabilities
  bool edits = false;                             // an entry has logit edits or path edits
  // data holds the upload, then what the edit rows read ([edit_bytes], to at.edits): their
  // count stays out of the upload's layout.
  std::size_t upload_bytes = 0, edit_bytes = 0, device_bytes = 0;
  // The result: [contexts] each context's sampled token (greedy: its argmax; -1: a row the CPU
  // refuses), [greedy + stochastic] accepted counts, [nodes] accepted nodes, [contexts] emitted
  // tokens (each sequence's at its first context).
  std::size_t result_ints() const;
  // The numbers that fix every launch, offset and copy of the verification enqueued for this
  // upload (the counts, the offsets, the sample runs): uploads of equal shape are enqueued
  // alike, so that a CUDA graph captured for one replays for the other.
  std::vector<std::size_t> shape() const;
  // Consecutive logit rows sampled into consecutive contexts; logit rows copied to the host.
  struct Run {
    int logit_row = 0, context = 0, rows = 0;
  };
  std::vector<Run> sample_runs, host_runs;
  // Per entry of `verify`: its sequence in its batch (stochastic ones counted after the greedy),
  // its first node and first context in the combined arrays.
  std::vector<int> sequence, first_node, first_context;
};

// The upload of `verify` (check_device_verify first) for `batch` on a model of `vocab` tokens.
VerifyUpload pack_verify(const RaggedBatch& batch, std::span<const DeviceVerify> verify, int vocab);

// Each entry's verdict from the result (VerifyUpload::result_ints() ints) and, where it asked
// for them, its log-probabilities ([contexts] when VerifyUpload::logprobs, else empty). Throws
// SpeculaError naming the batch span and context where a row was refused or a token could not
// be drawn.
std::vector<DeviceVerdict> unpack_verdicts(const VerifyUpload& up, std::span<const DeviceVerify> verify,
                                           std::span<const int> result, std::span<const EmittedLogprob> logprobs = {});

}  // namespace specula::cuda
