#include "engine/cuda/draft_plan.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace specula::cuda {
DrawOptionsAt append_draw_options(std::vector<unsigned char>& data, std::span<const DrawOptions> options) {
  std::vector<float> temperature, top_p, min_p;
  std::vector<int> top_k;
  for (const DrawOptions& o : options) {
    temperature.push_back(o.temperature);
    top_k.push_back(o.top_k);
    top_p.push_back(o.top_p);
    min_p.push_back(o.min_p);
  }
  DrawOptionsAt at;
  at.temperature = append_aligned(data, temperature.data(), options.size());
  at.top_k = append_aligned(data, top_k.data(), options.size());
  at.top_p = append_aligned(data, top_p.data(), options.size());
  at.min_p = append_aligned(data, min_p.data(), options.size());
  return at;
}

PathEditRow append_path_edits(std::vector<unsigned char>& data, const PathEdits& e, std::size_t upload_at) {
  PathEditRow row;
  row.edits_at = static_cast<std::int64_t>(upload_at + append_aligned(data, e.edits.data(), e.edits.size()));
  row.eos_at = static_cast<std::int64_t>(upload_at + append_aligned(data, e.eos_ids.data(), e.eos_ids.size()));
  row.edits = static_cast<int>(e.edits.size());
  row.eos = static_cast<int>(e.eos_ids.size());
  row.eos_until = e.eos_until;
  row.repetition = e.repetition;
  row.frequency = e.frequency;
  row.presence = e.presence;
  return row;
}

std::vector<PathEditRow> append_edit_rows(std::vector<unsigned char>& data, const DraftControls& controls,
                                          std::size_t upload_at) {
  std::vector<PathEditRow> sets;  // each set's edits and EOS ids, no path
  for (const PathEdits* e : controls.sets) sets.push_back(append_path_edits(data, *e, upload_at));
  const std::size_t paths_at =
      upload_at + append_aligned(data, controls.path_draws.data(), controls.path_draws.size());
  std::vector<PathEditRow> rows;
  for (std::size_t l = 0; l < controls.row_set.size(); ++l) {
    const int set = controls.row_set[l];
    PathEditRow& row = rows.emplace_back();
    if (set < 0) continue;
    row = sets[static_cast<std::size_t>(set)];
    row.path_at = static_cast<std::int64_t>(paths_at + static_cast<std::size_t>(controls.path_first[l]) * sizeof(int));
    row.path = controls.path_first[l + 1] - controls.path_first[l];
  }
  return rows;
}

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
  const std::size_t draws = static_cast<std::size_t>(up.first_draw.back());
  if (draft.keep_q) up.probs_rows = static_cast<int>(logit_rows);

  // The outputs first, then the upload with round 0's step last: what a later round reads sits
  // where it sat for another first round of a different row count.
  up.at.tokens = 0;
  up.at.probs = align_up(draws * sizeof(int));
  std::size_t end = up.at.probs + static_cast<std::size_t>(up.probs_rows) * static_cast<std::size_t>(vocab) * sizeof(float);
  if (draft.dynamic.on()) {
    up.dynamic = draft.dynamic;
    up.sequences = draft.batches.front().num_seqs();
    up.pool_cap = draft.dynamic.pool_cap();
    const std::size_t nodes = static_cast<std::size_t>(up.sequences) * static_cast<std::size_t>(draft.dynamic.budget);
    const auto reserve = [&end](std::size_t bytes) {
      const std::size_t at = align_up(end);
      end = at + bytes;
      return at;
    };
    up.at.node_tokens = reserve(nodes * sizeof(int));
    up.at.node_parents = reserve(nodes * sizeof(int));
    up.at.node_depth = reserve(nodes * sizeof(int));
    up.at.node_score = reserve(nodes * sizeof(double));
    up.at.pool = reserve(static_cast<std::size_t>(up.sequences) * static_cast<std::size_t>(up.pool_cap) * sizeof(DynamicCandidate));
    up.at.pool_size = reserve(static_cast<std::size_t>(up.sequences) * sizeof(int));
  }
  up.upload_at = align_up(end);
  const auto place = [&](const auto* src, std::size_t count) { return up.upload_at + append_aligned(up.data, src, count); };
  const DrawOptionsAt chains = append_draw_options(up.data, draft.options);
  up.at.temperature = up.upload_at + chains.temperature;
  up.at.top_k = up.upload_at + chains.top_k;
  up.at.top_p = up.upload_at + chains.top_p;
  up.at.min_p = up.upload_at + chains.min_p;
  if (up.children) {
    up.at.child_first = place(child_first.data(), child_first.size());
    up.at.child_modes = place(draft.child_modes.data(), logit_rows);
    up.at.sources = place(sources.data(), logit_rows);
  }
  up.at.uniforms = place(draft.uniforms.data(), draws);
  // Round 0's rows are fed no draw (check_draft_rounds): the feeds start at round 1's.
  const std::size_t fed_rows = draft.feeds.size() - static_cast<std::size_t>(up.first_row[std::min<std::size_t>(1, up.steps.size())]);
  up.at.feeds = place(draft.feeds.data() + (draft.feeds.size() - fed_rows), fed_rows);
  up.controls = draft.controls.on();
  if (up.controls) {  // zeros until what the rows read is placed
    const std::vector<PathEditRow> unplaced(logit_rows);
    up.at.edit_rows = place(unplaced.data(), logit_rows);
  }
  up.step_at.resize(up.steps.size());
  for (std::size_t r = 1; r <= up.steps.size(); ++r) {
    const StepUpload& step = up.steps[r % up.steps.size()];
    up.step_at[r % up.steps.size()] = place(step.data.data(), step.data.size());
  }
  // What the edit rows read last: its size moves nothing before it.
  if (up.controls) {
    const std::vector<PathEditRow> rows = append_edit_rows(up.data, draft.controls, up.upload_at);
    std::memcpy(up.data.data() + (up.at.edit_rows - up.upload_at), rows.data(), rows.size() * sizeof(PathEditRow));
  }
  up.upload_bytes = up.data.size();
  up.device_bytes = up.upload_at + up.upload_bytes;
  return up;
}

std::size_t DraftUpload::feeds_of(int round) const {
  assert(round > 0);
  return at.feeds + static_cast<std::size_t>(first_row[static_cast<std::size_t>(round)] - first_row[1]) * sizeof(int);
}

std::vector<std::size_t> DraftUpload::round_shape(int round, bool keep_q) const {
  const std::size_t r = static_cast<std::size_t>(round);
  std::vector<std::size_t> out = steps[r].key.shape();
  for (const std::size_t v : {r > 0 ? feeds_of(round) : 0, static_cast<std::size_t>(children), step_at[r],
                              static_cast<std::size_t>(first_logit[r]), static_cast<std::size_t>(first_draw[r]),
                              static_cast<std::size_t>(probs_row(round, keep_q)), upload_at, at.temperature, at.top_k,
                              at.top_p, at.min_p, at.child_first, at.child_modes, at.sources, at.uniforms, at.tokens,
                              at.probs, static_cast<std::size_t>(controls), at.edit_rows})
    out.push_back(v);
  if (!dynamic.on()) return out;
  // The dynamic-tree kernel writes the next round's rows.
  const bool next = r + 1 < steps.size();
  for (const std::size_t v : {static_cast<std::size_t>(dynamic.budget), static_cast<std::size_t>(dynamic.width),
                              static_cast<std::size_t>(dynamic.top_k), static_cast<std::size_t>(sequences),
                              static_cast<std::size_t>(pool_cap), next ? step_at[r + 1] : 0,
                              next ? steps[r + 1].layout.mask : 0, at.node_tokens, at.node_parents, at.node_depth,
                              at.node_score, at.pool, at.pool_size})
    out.push_back(v);
  return out;
}

}  // namespace specula::cuda
