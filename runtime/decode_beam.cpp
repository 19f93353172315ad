// Beam search over the target: the search driver (sampling/beam_search.h) runs on a
// BeamLanguageModel whose sequences are forks of one paged cache, so beams share their
// prefix blocks; each step feeds every live beam in one batched forward.
#include <chrono>

#include "runtime/decoders.h"
#include "sampling/beam_search.h"

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

}  // namespace

DecodeRun decode_beam(const Backend& target, const GenerateOptions& options, const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const int width = options.sampling.beam_width;
  // Live beams, their forks during a step, and the root.
  KvCache cache(target.model().kv_layout(options.kv_block_size), static_cast<int>(request_kv_blocks(options)));
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
                                        c.eos_token_id, n_best);
  cache.free(root);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.target_forwards = 1 + model.forwards();
  run.target_forwards_rows = prompt_len + model.rows();
  run.kv = cache.stats();
  nlohmann::json scores = nlohmann::json::array();
  for (const BeamHypothesis& h : result.hypotheses) {
    run.samples.push_back(h.tokens);
    scores.push_back({{"score", h.score}, {"sum_logprob", h.sum_logprob}});
  }
  if (sink)
    for (int token : run.samples.at(0)) sink(0, token);
  run.extra = {{"beam", {{"hypotheses", scores}}}};
  return run;
}

}  // namespace specula
