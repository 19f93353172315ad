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
  up.children = !draft.children.empty();
  up.first_row.push_back(0);
  up.first_logit.push_back(0);
  up.first_draw.push_back(0);
  std::vector<int> child_first{0}, sources;  // children only
  for (int r = 0; r < draft.rounds(); ++r) {
    const std::size_t ru = static_cast<std::size_t>(r);
    const RaggedBatch& batch = draft.batches[ru];
    up.steps.push_back(pack_step(batch, draft.plans[ru], window, options, pages_id));
    const StepUpload& step = up.steps.back();
    up.step_at.push_back(append(up.data, step.data.data(), step.data.size()));
    int draws = batch.num_logits();
    if (up.children) {
      draws = 0;
      for (int l = 0; l < batch.num_logits(); ++l) {
        draws += draft.children[static_cast<std::size_t>(up.first_logit.back() + l)];
        child_first.push_back(up.first_draw.back() + draws);
        const int row = up.first_row.back() + batch.logit_rows[static_cast<std::size_t>(l)];
        sources.push_back(draft.feeds[static_cast<std::size_t>(row)]);
      }
    }
    up.first_row.push_back(up.first_row.back() + batch.num_rows());
    up.first_logit.push_back(up.first_logit.back() + batch.num_logits());
    up.first_draw.push_back(up.first_draw.back() + draws);
    up.probs_rows = std::max(up.probs_rows, batch.num_logits());
  }
  const std::size_t logit_rows = draft.options.size();
  std::vector<float> temperature(logit_rows), top_p(logit_rows), min_p(logit_rows);
  std::vector<int> top_k(logit_rows);
  for (std::size_t l = 0; l < logit_rows; ++l) {
    temperature[l] = draft.options[l].temperature;
    top_k[l] = draft.options[l].top_k;
    top_p[l] = draft.options[l].top_p;
    min_p[l] = draft.options[l].min_p;
  }
  up.at.feeds = append(up.data, draft.feeds.data(), draft.feeds.size());
  up.at.temperature = append(up.data, temperature.data(), logit_rows);
  up.at.top_k = append(up.data, top_k.data(), logit_rows);
  up.at.top_p = append(up.data, top_p.data(), logit_rows);
  up.at.min_p = append(up.data, min_p.data(), logit_rows);
  if (up.children) {
    up.at.child_first = append(up.data, child_first.data(), child_first.size());
    up.at.child_modes = append(up.data, draft.child_modes.data(), logit_rows);
    up.at.sources = append(up.data, sources.data(), logit_rows);
  }
  const std::size_t draws = static_cast<std::size_t>(up.first_draw.back());
  up.at.uniforms = append(up.data, draft.uniforms.data(), draws);
  up.upload_bytes = up.data.size();
  if (draft.keep_q) up.probs_rows = static_cast<int>(logit_rows);
  up.at.tokens = align_up(up.upload_bytes);
  up.at.probs = align_up(up.at.tokens + draws * sizeof(int));
  up.device_bytes = up.at.probs + static_cast<std::size_t>(up.probs_rows) * static_cast<std::size_t>(vocab) * sizeof(float);
  return up;
}

}  // namespace specula::cuda
