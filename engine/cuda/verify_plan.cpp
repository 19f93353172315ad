#include "engine/cuda/verify_plan.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "engine/cuda/cuda_plan.h"
#include "engine/cuda/draft_plan.h"
#include "engine/cuda/verify_tree.h"

namespace specula::cuda {
namespace {

constexpr std::size_t kArrayAlign = 16;

std::size_t align16(std::size_t n) { return (n + kArrayAlign - 1) / kArrayAlign * kArrayAlign; }

template <class T>
void put(std::vector<unsigned char>& data, std::size_t offset, std::span<const T> values) {
  if (!values.empty()) std::memcpy(data.data() + offset, values.data(), values.size_bytes());
}

// Appends entry `v`'s edit rows ([n + 1], one a context) to `rows` and what they read to `tail`
// (offsets within it): each context's host-made edits; or, with path_edits, the entry's edits
// and EOS ids once and each context's path, its nodes from the root down (numbered from
// first_node on, as the verification's tokens hold them); else rows that edit nothing.
void append_edit_rows(const DeviceVerify& v, int first_node, std::vector<unsigned char>& tail,
                      std::vector<PathEditRow>& rows) {
  const int n = static_cast<int>(v.tokens.size());
  if (v.path_edits != nullptr) {
    const PathEditRow root = append_path_edits(tail, *v.path_edits, 0);
    std::vector<int> paths, path_first{0};
    for (int c = 0; c <= n; ++c) {
      append_path_nodes(v.parents, c, paths);
      path_first.push_back(static_cast<int>(paths.size()));
    }
    for (int& node : paths) node += first_node;
    const std::size_t paths_at = append_aligned(tail, paths.data(), paths.size());
    for (std::size_t c = 0; c <= static_cast<std::size_t>(n); ++c) {
      PathEditRow& row = rows.emplace_back(root);
      row.path_at = static_cast<std::int64_t>(paths_at + static_cast<std::size_t>(path_first[c]) * sizeof(int));
      row.path = path_first[c + 1] - path_first[c];
    }
    return;
  }
  if (v.edit_first.empty()) {
    rows.insert(rows.end(), static_cast<std::size_t>(n + 1), PathEditRow{});
    return;
  }
  const std::size_t edits_at = append_aligned(tail, v.edits.data(), v.edits.size());
  for (std::size_t c = 0; c <= static_cast<std::size_t>(n); ++c) {
    PathEditRow& row = rows.emplace_back();
    row.edits_at = static_cast<std::int64_t>(edits_at + static_cast<std::size_t>(v.edit_first[c]) * sizeof(TokenEdit));
    row.edits = v.edit_first[c + 1] - v.edit_first[c];
    row.repetition = v.repetition_penalty;
    row.frequency = v.frequency_penalty;
    row.presence = v.presence_penalty;
  }
}

}  // namespace

std::size_t VerifyUpload::result_ints() const {
  return 2 * static_cast<std::size_t>(contexts) + static_cast<std::size_t>(greedy + stochastic) +
         static_cast<std::size_t>(nodes);
}

std::vector<std::size_t> VerifyUpload::shape() const {
  std::vector<std::size_t> out{static_cast<std::size_t>(greedy),
                               static_cast<std::size_t>(stochastic),
                               static_cast<std::size_t>(greedy_nodes),
                               static_cast<std::size_t>(nodes),
                               static_cast<std::size_t>(greedy_contexts),
                               static_cast<std::size_t>(contexts),
                               at.greedy_indptr,
                               at.stochastic_indptr,
                               at.tokens,
                               at.parents,
                               at.draw,
                               at.rule,
                               at.scratch_first,
                               at.top_k,
                               at.temperature,
                               at.top_p,
                               at.min_p,
                               at.draw_uniforms,
                               at.uniforms,
                               at.q,
                               at.probs,
                               at.scratch,
                               at.result,
                               at.edit_rows,
                               at.edited,
                               at.edits,
                               at.logprob_sequence,
                               at.logprob_source,
                               at.logprob_top,
                               at.logprob_first,
                               at.logprobs,
                               static_cast<std::size_t>(logprobs),
                               upload_bytes,
                               at.edits};
  for (const Run& run : sample_runs)
    out.insert(out.end(), {static_cast<std::size_t>(run.logit_row), static_cast<std::size_t>(run.context),
                           static_cast<std::size_t>(run.rows)});
  return out;
}

VerifyUpload pack_verify(const RaggedBatch& batch, std::span<const DeviceVerify> verify, int vocab) {
  check_device_verify(batch, verify, vocab);
  VerifyUpload up;
  // The order of the combined arrays: greedy entries, then stochastic ones.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < verify.size(); ++i)
    if (verify[i].greedy()) order.push_back(i);
  up.greedy = static_cast<int>(order.size());
  for (std::size_t i = 0; i < verify.size(); ++i)
    if (!verify[i].greedy()) order.push_back(i);
  up.stochastic = static_cast<int>(verify.size()) - up.greedy;

  up.sequence.assign(verify.size(), 0);
  up.first_node.assign(verify.size(), 0);
  up.first_context.assign(verify.size(), 0);
  std::vector<int> greedy_indptr{0}, stochastic_indptr{0}, tokens, parents, draw, rule, top_k;
  std::vector<long long> scratch_first;
  std::size_t scratch = 0;
  std::vector<float> temperature, top_p, min_p;
  std::vector<double> uniforms;
  std::vector<int> logprob_sequence, logprob_source, logprob_top, logprob_first;
  std::vector<PathEditRow> edit_rows;  // [contexts] offsets within `edited_tail`
  std::vector<unsigned char> edited_tail;  // what the rows read, at.edits on the device
  for (std::size_t k = 0; k < order.size(); ++k) {
    const DeviceVerify& v = verify[order[k]];
    const int n = static_cast<int>(v.tokens.size());
    logprob_sequence.insert(logprob_sequence.end(), static_cast<std::size_t>(n + 1), static_cast<int>(k));
    logprob_source.push_back(v.logprob_top >= 0 ? v.logprob_source : -1);
    logprob_top.push_back(std::max(v.logprob_top, 0));
    logprob_first.insert(logprob_first.end(), {up.contexts, up.nodes, first_logit_row(batch, v.part)});
    up.logprobs = up.logprobs || v.logprob_top >= 0;
    up.sequence[order[k]] = static_cast<int>(k);
    up.first_node[order[k]] = up.nodes;
    up.first_context[order[k]] = up.contexts;
    up.nodes += n;
    up.contexts += n + 1;
    if (v.greedy()) up.greedy_nodes += n, up.greedy_contexts += n + 1;
    std::vector<int>& indptr = v.greedy() ? greedy_indptr : stochastic_indptr;
    indptr.push_back(indptr.back() + n);
    tokens.insert(tokens.end(), v.tokens.begin(), v.tokens.end());
    parents.insert(parents.end(), v.parents.begin(), v.parents.end());
    top_k.insert(top_k.end(), static_cast<std::size_t>(n + 1), v.top_k);
    temperature.insert(temperature.end(), static_cast<std::size_t>(n + 1), v.temperature);
    top_p.insert(top_p.end(), static_cast<std::size_t>(n + 1), v.top_p);
    min_p.insert(min_p.end(), static_cast<std::size_t>(n + 1), v.min_p);
    append_edit_rows(v, up.first_node[order[k]], edited_tail, edit_rows);
    up.edits = up.edits || !v.edit_first.empty() || v.path_edits != nullptr;
    if (!v.greedy()) {
      draw.insert(draw.end(), v.draw.begin(), v.draw.end());
      rule.push_back(v.rule);
      scratch_first.push_back(static_cast<long long>(scratch));
      scratch += scratch_doubles(v.parents, v.rule, vocab);
      uniforms.insert(uniforms.end(), v.uniforms.begin(), v.uniforms.end());
    }
  }

  const std::size_t contexts = static_cast<std::size_t>(up.contexts), v = static_cast<std::size_t>(vocab);
  const std::size_t stochastic_contexts = contexts - static_cast<std::size_t>(up.greedy_contexts);
  std::size_t at = 0;
  const auto take = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at = align16(at + bytes);
    return offset;
  };
  up.at.greedy_indptr = take(greedy_indptr.size() * sizeof(int));
  up.at.stochastic_indptr = take(stochastic_indptr.size() * sizeof(int));
  up.at.tokens = take(tokens.size() * sizeof(int));
  up.at.parents = take(parents.size() * sizeof(int));
  up.at.draw = take(draw.size() * sizeof(int));
  up.at.rule = take(rule.size() * sizeof(int));
  up.at.scratch_first = take(scratch_first.size() * sizeof(long long));
  up.at.top_k = take(contexts * sizeof(int));
  up.at.temperature = take(contexts * sizeof(float));
  up.at.top_p = take(contexts * sizeof(float));
  up.at.min_p = take(contexts * sizeof(float));
  up.at.draw_uniforms = take(contexts * sizeof(double));
  up.at.uniforms = take(uniforms.size() * sizeof(double));
  up.at.q = take(stochastic_contexts * v * sizeof(float));
  up.at.logprob_sequence = take(logprob_sequence.size() * sizeof(int));
  up.at.logprob_source = take(logprob_source.size() * sizeof(int));
  up.at.logprob_top = take(logprob_top.size() * sizeof(int));
  up.at.logprob_first = take(logprob_first.size() * sizeof(int));
  const std::size_t edited_contexts = up.edits ? contexts : 0;
  up.at.edit_rows = take(edited_contexts * sizeof(PathEditRow));
  up.upload_bytes = at;
  up.at.probs = take(contexts * v * sizeof(float));
  up.at.scratch = take(scratch * sizeof(double));
  up.at.result = take(up.result_ints() * sizeof(int));
  up.at.logprobs = take((up.logprobs ? contexts : 0) * sizeof(EmittedLogprob));
  up.at.edited = take(edited_contexts * v * sizeof(float));
  up.at.edits = at;
  up.edit_bytes = up.edits ? edited_tail.size() : 0;
  up.device_bytes = align16(at + up.edit_bytes);

  // zeros: the draw uniforms and the q rows of sequences without q
  up.data.assign(up.upload_bytes + up.edit_bytes, 0);
  put(up.data, up.at.greedy_indptr, std::span<const int>(greedy_indptr));
  put(up.data, up.at.stochastic_indptr, std::span<const int>(stochastic_indptr));
  put(up.data, up.at.tokens, std::span<const int>(tokens));
  put(up.data, up.at.parents, std::span<const int>(parents));
  put(up.data, up.at.draw, std::span<const int>(draw));
  put(up.data, up.at.rule, std::span<const int>(rule));
  put(up.data, up.at.scratch_first, std::span<const long long>(scratch_first));
  put(up.data, up.at.top_k, std::span<const int>(top_k));
  put(up.data, up.at.temperature, std::span<const float>(temperature));
  put(up.data, up.at.top_p, std::span<const float>(top_p));
  put(up.data, up.at.min_p, std::span<const float>(min_p));
  put(up.data, up.at.uniforms, std::span<const double>(uniforms));
  put(up.data, up.at.logprob_sequence, std::span<const int>(logprob_sequence));
  put(up.data, up.at.logprob_source, std::span<const int>(logprob_source));
  put(up.data, up.at.logprob_top, std::span<const int>(logprob_top));
  put(up.data, up.at.logprob_first, std::span<const int>(logprob_first));
  if (up.edits) {
    for (PathEditRow& row : edit_rows) {  // the tail's offsets as the device buffer's
      row.edits_at += static_cast<std::int64_t>(up.at.edits);
      row.eos_at += static_cast<std::int64_t>(up.at.edits);
      row.path_at += static_cast<std::int64_t>(up.at.edits);
    }
    put(up.data, up.at.edit_rows, std::span<const PathEditRow>(edit_rows));
    put(up.data, up.upload_bytes, std::span<const unsigned char>(edited_tail));
  }
  for (std::size_t i = 0; i < verify.size(); ++i) {
    if (verify[i].greedy() || verify[i].q.empty()) continue;
    const std::size_t row = static_cast<std::size_t>(up.first_context[i] - up.greedy_contexts);
    put(up.data, up.at.q + row * v * sizeof(float), verify[i].q);
  }

  // Logit rows: each verified span's into its contexts, the rest to the host.
  std::vector<int> context_of(static_cast<std::size_t>(batch.num_logits()), -1);
  for (std::size_t i = 0; i < verify.size(); ++i) {
    const int first = first_logit_row(batch, verify[i].part);
    for (int c = 0; c <= static_cast<int>(verify[i].tokens.size()); ++c)
      context_of[static_cast<std::size_t>(first + c)] = up.first_context[i] + c;
  }
  for (int r = 0; r < batch.num_logits(); ++r) {
    const int c = context_of[static_cast<std::size_t>(r)];
    auto& runs = c < 0 ? up.host_runs : up.sample_runs;
    if (!runs.empty() && runs.back().logit_row + runs.back().rows == r &&
        (c < 0 || runs.back().context + runs.back().rows == c)) {
      ++runs.back().rows;
    } else {
      runs.push_back({r, std::max(c, 0), 1});
    }
  }
  return up;
}

std::vector<DeviceVerdict> unpack_verdicts(const VerifyUpload& up, std::span<const DeviceVerify> verify,
                                           std::span<const int> result, std::span<const EmittedLogprob> logprobs) {
  SPECULA_CHECK(result.size() == up.result_ints(), "device verification: ", result.size(), " result ints, need ",
                up.result_ints());
  SPECULA_CHECK(logprobs.size() == (up.logprobs ? static_cast<std::size_t>(up.contexts) : 0),
                "device verification: ", logprobs.size(), " log-probabilities, need ", up.logprobs ? up.contexts : 0);
  const std::size_t contexts = static_cast<std::size_t>(up.contexts);
  const std::span<const int> sampled = result.first(contexts);
  const std::span<const int> counts = result.subspan(contexts, static_cast<std::size_t>(up.greedy + up.stochastic));
  const std::span<const int> nodes = result.subspan(contexts + counts.size(), static_cast<std::size_t>(up.nodes));
  const std::span<const int> emitted = result.subspan(contexts + counts.size() + nodes.size(), contexts);
  std::vector<DeviceVerdict> verdicts(verify.size());
  for (std::size_t i = 0; i < verify.size(); ++i) {
    const int n = static_cast<int>(verify[i].tokens.size());
    const std::size_t c0 = static_cast<std::size_t>(up.first_context[i]);
    for (int c = 0; c <= n; ++c)
      SPECULA_CHECK(sampled[c0 + static_cast<std::size_t>(c)] >= 0, "device verification: batch span ",
                    verify[i].part, ", context ", c,
                    ": the sampler refuses the target's logits (a NaN or +inf logit, or every logit -inf)");
    const int count = counts[static_cast<std::size_t>(up.sequence[i])];
    SPECULA_CHECK(count >= 0 && count <= n, "device verification: batch span ", verify[i].part, ": accepted count ",
                  count, " is outside [0, ", n, "]");
    const auto path = nodes.subspan(static_cast<std::size_t>(up.first_node[i]), static_cast<std::size_t>(count));
    const auto tokens = emitted.subspan(c0, static_cast<std::size_t>(count) + 1);
    SPECULA_CHECK(std::all_of(tokens.begin(), tokens.end(), [](int t) { return t >= 0; }),
                  "device verification: batch span ", verify[i].part,
                  ": no token could be drawn (the target's distribution has no mass there)");
    verdicts[i].accepted_nodes.assign(path.begin(), path.end());
    verdicts[i].tokens.assign(tokens.begin(), tokens.end());
    if (verify[i].logprob_top < 0) continue;
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const EmittedLogprob& e = logprobs[c0 + k];
      verdicts[i].logprobs.push_back(e.logprob);
      std::vector<std::pair<int, double>>& top = verdicts[i].top.emplace_back();
      for (int j = 0; j < verify[i].logprob_top && e.top_token[j] >= 0; ++j) top.emplace_back(e.top_token[j], e.top_logprob[j]);
    }
  }
  return verdicts;
}

}  // namespace specula::cuda
