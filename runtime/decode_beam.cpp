// Beam search over the target: the plain driver (sampling/beam_search.h) runs on a
// BeamLanguageModel whose sequences are forks of one paged cache, so beams share their
// prefix blocks; each step feeds every live beam in one batched forward. With a drafter,
// SpeculativeBeam (runtime/speculative_beam.h) replays the same step rule over verified draft
// trees, several beam steps per target forward, with the same output.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "runtime/decoders.h"
#include "runtime/scheduler_limits.h"
#include "runtime/speculative_beam.h"
#include "sampling/beam_search.h"
#include "text/stop_strings.h"

namespace specula {
namespace {

class CachedBeamModel : public BeamLanguageModel {
 public:
  explicit CachedBeamModel(const ForwardContext& context) : context_(context) {}

  int vocab_size() const override { return context_.backend.config().vocab_size; }
  int fork(int seq) override { return context_.cache.fork(seq); }
  void release(int seq) override { context_.cache.free(seq); }
  void step(std::span<const int> seqs, std::span<const int> tokens, std::span<float> logits) override {
    positions_.resize(seqs.size());
    parts_.clear();
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      positions_[i] = context_.cache.length(seqs[i]);
      parts_.push_back({seqs[i], tokens.subspan(i, 1), std::span(&positions_[i], 1), {}, RowLogits::kLast});
    }
    context_.run(parts_, logits);
    ++forwards_;
    rows_ += static_cast<int>(seqs.size());
  }
  int forwards() const { return forwards_; }
  int rows() const { return rows_; }

 private:
  ForwardContext context_;
  std::vector<int> positions_;
  std::vector<SequenceRows> parts_;
  int forwards_ = 0, rows_ = 0;
};

// Ends a hypothesis at the token whose text completes one of `stops` (text/stop_strings.h);
// each candidate's text extends its parent beam's, kept by the beam's tokens.
HypothesisEnds stop_string_ends(const Tokenizer& tokenizer, const std::vector<std::string>& stops) {
  if (stops.empty()) return {};
  auto texts = std::make_shared<std::map<std::vector<int>, StopStrings>>();
  return [&tokenizer, stops, texts](std::span<const int> tokens) {
    const std::vector<int> parent(tokens.begin(), tokens.end() - 1);
    const auto it = texts->find(parent);
    StopStrings text = it != texts->end() ? it->second : stop_text(tokenizer, stops, parent);
    if (text.feed(tokenizer.decode_piece(parent, tokens.back()))) return true;
    texts->emplace(std::vector<int>(tokens.begin(), tokens.end()), std::move(text));
    return false;
  };
}

// The n-best as the run's samples (the best streamed to `sink`); returns their scores for
// stats.beam.hypotheses.
nlohmann::json take_hypotheses(const BeamResult& result, DecodeRun& run, const TokenSink& sink) {
  nlohmann::json scores = nlohmann::json::array();
  for (const BeamHypothesis& h : result.hypotheses) {
    run.samples.push_back(h.tokens);
    scores.push_back({{"score", h.score}, {"sum_logprob", h.sum_logprob}});
  }
  if (sink)
    for (int token : run.samples.at(0)) sink(0, token, nullptr);  // beam gives no logprobs
  return scores;
}

}  // namespace

DecodeRun decode_beam(const Backend& target, const GenerateOptions& options, const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const int width = options.sampling.beam_width;
  // Live beams, their forks during a step, and the root.
  KvCache cache(request_kv_layout(target, options), request_kv_blocks(options, 1));
  const auto workspace = target.make_workspace();
  const ForwardContext context{target, cache, *workspace};
  DecodeRun run;
  const auto start = Clock::now();
  std::vector<float> logits;
  const int root = prefill(context, options.prompt_ids, logits);
  const auto decode_start = Clock::now();
  run.prefill_s = std::chrono::duration<double>(decode_start - start).count();

  CachedBeamModel model(context);
  const int n_best = std::min(options.num_samples, width);
  const BeamResult result = beam_search(model, root, logits, options.sampling, options.max_new_tokens,
                                        c.eos_token_ids, n_best, options.controls, options.prompt_ids,
                                        stop_string_ends(target.model().tokenizer(), options.stop_strings));
  cache.free(root);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.target_forwards = 1 + model.forwards();
  run.target_forwards_rows = prompt_len + model.rows();
  run.target_sequences = 1 + model.rows();  // the prompt, then one row per live beam
  run.kv = cache.stats();
  run.extra = {{"beam", {{"hypotheses", take_hypotheses(result, run, sink)}}}};
  return run;
}

DecodeRun decode_speculative_beam(ModelStore& models, const Backend& target, const GenerateOptions& options,
                                  const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const DraftOptions& d = options.draft;
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const int width = options.sampling.beam_width;
  // Live beams and their forks during a step (2W), each with its largest tree, and the root.
  const int blocks = request_kv_blocks(options, 1);
  KvCache cache(request_kv_layout(target, options), blocks);
  const auto workspace = target.make_workspace();
  const ForwardContext context{target, cache, *workspace};
  const Backend* draft = d.method == DraftMethod::kModel ? &draft_model(models, d, options.backend) : nullptr;
  std::unique_ptr<KvCache> draft_cache;
  std::unique_ptr<Workspace> draft_workspace;
  std::unique_ptr<ForwardContext> draft_context;
  if (draft) {
    draft_cache = std::make_unique<KvCache>(request_kv_layout(*draft, options), blocks);
    draft_workspace = draft->make_workspace();
    draft_context = std::make_unique<ForwardContext>(ForwardContext{*draft, *draft_cache, *draft_workspace});
  }

  DecodeRun run;
  const auto start = Clock::now();
  const auto body = std::span(options.prompt_ids).first(static_cast<std::size_t>(prompt_len - 1));  // the root is fed by step 1
  std::vector<float> unused;
  const KvCache::SeqId root_seq = prefill(context, body, unused);
  const KvCache::SeqId draft_root_seq = draft ? prefill(*draft_context, body, unused) : -1;
  if (!body.empty()) {
    ++run.target_forwards;
    run.target_forwards_rows += static_cast<int>(body.size());
    ++run.target_sequences;
  }
  const auto decode_start = Clock::now();
  run.prefill_s = std::chrono::duration<double>(decode_start - start).count();

  const std::unique_ptr<BeamDrafters> drafters = make_beam_drafters(d, draft_context.get(), draft_root_seq);
  SpeculativeStats stats;
  BeamResult result;
  long beam_steps = 0;
  {
    SpeculativeBeam beam(context, root_seq, *drafters, options.sampling, options.max_new_tokens,
                         target.config().eos_token_ids, options.prompt_ids, options.controls,
                         stop_string_ends(target.model().tokenizer(), options.stop_strings));
    while (!beam.done()) {
      run.target_sequences += beam.num_beams();  // every live beam has its root and tree in the forward
      beam_steps += speculative_beam_step(beam, context, stats);
    }
    result = std::move(beam).result(std::min(options.num_samples, width));
  }
  if (draft) draft_cache->free(draft_root_seq);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.target_forwards += static_cast<int>(stats.target_forwards);
  run.target_forwards_rows += static_cast<int>(stats.target_rows);
  run.kv = cache.stats();
  const nlohmann::json scores = take_hypotheses(result, run, sink);
  // τ counts beam steps per target forward: every live beam advances one token per step.
  run.extra = speculative_stats_json(d, stats, beam_steps, drafters->draft_forwards());
  run.extra["beam"] = {{"hypotheses", scores}, {"steps", beam_steps}};
  if (draft_cache) run.extra["draft"]["kv_blocks_in_use_at_end"] = draft_cache->stats().blocks_in_use;
  return run;
}

}  // namespace specula
