#include "engine/cuda/draft_plan.h"

#include <algorithm>
#include <cstring>

namespace specula::cuda {
namespace {

// Appends `count` elements of `src` at the next multiple of kAlign; returns where.
template <class T>
std::size_t append(std::vector<unsigned char>& data, const T* src, std::size_t count) {
  const std::size_t at = align_up(data.size());
  data.resize(at + count * sizeof(T), 0);
  if (count > 0) std::memcpy(data.data() + at, src, count * sizeof(T));
  return at;
}

}  // namespace

DraftUpload pack_draft(const DraftRounds& draft, int vocab, int window, const CudaOptions& options,
                       std::uint64_t pages_id) {
  check_draft_rounds(draft, vocab);
  DraftUpload up;
  up.first_row.push_back(0);
  up.first_draw.push_back(0);
  for (int r = 0; r < draft.rounds(); ++r) {
    const std::size_t ru = static_cast<std::size_t>(r);
    up.steps.push_back(pack_step(draft.batches[ru], draft.plans[ru], window, options, pages_id));
    const StepUpload& step = up.steps.back();
    up.step_at.push_back(append(up.data, step.data.data(), step.data.size()));
    up.first_row.push_back(up.first_row.back() + draft.batches[ru].num_rows());
    up.first_draw.push_back(up.first_draw.back() + draft.batches[ru].num_logits());
    up.probs_rows = std::max(up.probs_rows, draft.batches[ru].num_logits());
  }
  const std::size_t draws = draft.options.size();
  std::vector<float> temperature(draws), top_p(draws), min_p(draws);
  std::vector<int> top_k(draws);
  for (std::size_t d = 0; d < draws; ++d) {
    temperature[d] = draft.options[d].temperature;
    top_k[d] = draft.options[d].top_k;
    top_p[d] = draft.options[d].top_p;
    min_p[d] = draft.options[d].min_p;
  }
  up.at.feeds = append(up.data, draft.feeds.data(), draft.feeds.size());
  up.at.temperature = append(up.data, temperature.data(), draws);
  up.at.top_k = append(up.data, top_k.data(), draws);
  up.at.top_p = append(up.data, top_p.data(), draws);
  up.at.min_p = append(up.data, min_p.data(), draws);
  up.at.uniforms = append(up.data, draft.uniforms.data(), draws);
  up.upload_bytes = up.data.size();
  if (draft.keep_q) up.probs_rows = static_cast<int>(draws);
  up.at.tokens = align_up(up.upload_bytes);
  up.at.probs = align_up(up.at.tokens + draws * sizeof(int));
  up.device_bytes = up.at.probs + static_cast<std::size_t>(up.probs_rows) * static_cast<std::size_t>(vocab) * sizeof(float);
  return up;
}

}  // namespace specula::cuda
