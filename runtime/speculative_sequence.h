// defines: SpeculativeSequence, one sequence decoded speculatively step by step (draft,
// verify forward, sampling + verification, commit), and SpeculativeStats, the counters and
// times its steps accumulate. decode_speculative() drives one per sample; tests drive
// them directly to inspect the caches between steps.
#pragma once

#include <memory>
#include <vector>

#include "draft/drafter.h"
#include "engine/model.h"
#include "sampling/sampler.h"
#include "verify/verifier.h"

namespace specula {

struct SpeculativeStats {
  long steps = 0;
  long drafted = 0;                     // tree nodes proposed
  long accepted = 0;                    // tree nodes accepted
  std::vector<long> accepted_at_depth;  // [depth - 1] steps whose accepted path reached depth
  double draft_s = 0, verify_forward_s = 0, sample_verify_s = 0, commit_s = 0;
};

class SpeculativeSequence {
 public:
  // `seq` (owned, freed on destruction) holds every committed token but the last, the
  // root; `committed` is the prompt (and anything generated before).
  SpeculativeSequence(Model& target, PagedKvCache& cache, PagedKvCache::SeqId seq, std::unique_ptr<Drafter> drafter,
                      const Sampler& sampler, std::vector<int> committed, Philox rng);
  ~SpeculativeSequence();
  SpeculativeSequence(const SpeculativeSequence&) = delete;
  SpeculativeSequence& operator=(const SpeculativeSequence&) = delete;

  // One speculative step with a tree at most max_depth deep. Returns the emitted tokens
  // (accepted + one bonus/corrected), already appended to committed().
  const VerifyResult& step(int max_depth, SpeculativeStats& stats);

  const std::vector<int>& committed() const { return committed_; }
  PagedKvCache::SeqId seq() const { return seq_; }
  Drafter& drafter() { return *drafter_; }

 private:
  Model& target_;
  PagedKvCache& cache_;
  PagedKvCache::SeqId seq_;
  std::unique_ptr<Drafter> drafter_;
  const Sampler& sampler_;
  std::vector<int> committed_;
  Philox rng_;
  VerifyResult result_;
  // Scratch reused across steps.
  std::vector<float> logits_, p_;
  std::vector<int> tokens_, positions_, parents_, argmaxes_, path_;
};

}  // namespace specula
