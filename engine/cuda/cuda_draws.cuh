// defines: DrawMarks (a workspace's events around the rounds of draws it enqueued, and their
// generation), DrawsAt (where those draws lie in device memory), CudaDraws, the engine's
// DeviceDraws on the CUDA module: draws a draft model's rounds (cuda_backend.cu), an EAGLE
// head's (head_cuda.cu) or Medusa heads (medusa_cuda.cu) left on the device, which
// forward_verify reads on the target's stream after waiting for done(); enqueue_round_draws,
// the draws of one draft round from its logit rows, and dynamic_tree_args, the dynamic-tree
// kernel's arguments after a round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/draft_plan.h"
#include "engine/cuda/kernels.cuh"
#include "engine/device_draft.h"

namespace specula::cuda {

// events[0] marks the start of a workspace's rounds of draws, events[r + 1] the end of round r;
// generation counts the enqueues (draws of an older one are stale: their buffers were reused).
struct DrawMarks {
  std::vector<cudaEvent_t> events;
  std::uint64_t generation = 0;

  DrawMarks() = default;
  DrawMarks(const DrawMarks&) = delete;
  DrawMarks& operator=(const DrawMarks&) = delete;
  ~DrawMarks() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  // A new enqueue of `rounds` rounds: the generation advances, an event per mark exists.
  void begin(int rounds) {
    ++generation;
    while (events.size() < static_cast<std::size_t>(rounds) + 1) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
    }
  }
  // The device seconds of the first `rounds` rounds (their work done).
  std::vector<double> seconds(int rounds) const {
    std::vector<double> out;
    for (std::size_t r = 0; r < static_cast<std::size_t>(rounds); ++r) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events[r], events[r + 1]));
      out.push_back(ms * 1e-3);
    }
    return out;
  }
};

// Where an enqueue leaves its draws on the device.
struct DrawsAt {
  const int* tokens = nullptr;        // [draws]
  const float* probs = nullptr;       // [logit rows, vocab] where q is kept
  const int* node_tokens = nullptr;   // [dynamic nodes] with dynamic trees
  const int* node_parents = nullptr;  // [dynamic nodes] with dynamic trees
};

// Draws left on the device by an enqueue of `rounds` rounds on a workspace whose marks are
// `marks`: valid while the marks' generation is theirs; done() (the last round's mark) is
// recorded after them. Of dynamic trees, the draws are the nodes, and the children the rounds
// drew their candidates.
class CudaDraws : public DeviceDraws {
 public:
  // draw_rows: [draws] the logit row (of probs) each draw was drawn from.
  CudaDraws(const DrawMarks& marks, std::vector<int> draw_rows, bool keep_q, int rounds, int tree_budget, int nodes,
            const DrawsAt& at)
      : marks_(marks),
        generation_(marks.generation),
        draw_rows_(std::move(draw_rows)),
        keep_q_(keep_q),
        rounds_(rounds),
        tree_budget_(tree_budget),
        nodes_(nodes),
        at_(at) {}
  int draws() const override { return tree_budget_ > 0 ? nodes_ : static_cast<int>(draw_rows_.size()); }
  // The row of probs() draw d was drawn from.
  int q_row(int d) const { return draw_rows_[static_cast<std::size_t>(d)]; }
  bool keeps_q() const override { return keep_q_; }
  int tree_budget() const override { return tree_budget_; }
  std::vector<double> round_seconds() const override {
    check_current();
    return marks_.seconds(rounds_);
  }
  void check_current() const {
    SPECULA_CHECK(marks_.generation == generation_,
                  "device draws: a later draft on their workspace has overwritten them");
  }
  cudaEvent_t done() const { return marks_.events[static_cast<std::size_t>(rounds_)]; }
  const int* tokens() const { return tree_budget_ > 0 ? at_.node_tokens : at_.tokens; }  // [draws()]
  const float* probs() const { return at_.probs; }
  const int* parents() const { return at_.node_parents; }  // [draws()] of dynamic trees
  // Of dynamic trees, the children the rounds drew (-1: a refused row), [children()].
  const int* children_drawn() const { return at_.tokens; }
  int children() const { return tree_budget_ > 0 ? static_cast<int>(draw_rows_.size()) : 0; }

 private:
  const DrawMarks& marks_;
  std::uint64_t generation_;
  std::vector<int> draw_rows_;  // [the rounds' draws] each draw's logit row
  bool keep_q_;
  int rounds_;
  int tree_budget_, nodes_;     // dynamic trees: nodes a tree, in all
  DrawsAt at_;
};

// Round `round`'s draws (DraftUpload's layout in the draft buffer at `base`) on `stream`: where
// the rounds have controls, its logit rows edited over their paths (launch_edit_logits);
// its logit rows' distributions (launch_sample) into the probs output (DraftUpload::probs_row),
// then one draw a row or, where the rounds draw children, each row's children
// (launch_draw_children). Returns where the round's distributions are.
//   logits: in/out [the round's logit rows, vocab] (edited in place)
float* enqueue_round_draws(const DraftUpload& up, int round, bool keep_q, unsigned char* base, float* logits,
                           int vocab, cudaStream_t stream);

// The dynamic-tree kernel's arguments after round `round` of `up` in the draft buffer at `base`
// (a model of `vocab` tokens, sliding `window`): the round's distributions `probs` and its
// children's draws `children`; the next round's rows where there is one.
DynamicTreeArgs dynamic_tree_args(const DraftUpload& up, int round, unsigned char* base, const float* probs,
                                  const int* children, int vocab, int window);

}  // namespace specula::cuda
