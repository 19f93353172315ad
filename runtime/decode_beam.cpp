// Beam search over the target: the search driver (sampling/beam_search.h) runs on a
// BeamLanguageModel whose sequences are forks of one paged cache, so beams share their
// prefix blocks.
#include <chrono>

#include "runtime/decoders.h"
#include "sampling/beam_search.h"

namespace specula {
namespace {

class CachedBeamModel : public BeamLanguageModel {
 public:
  CachedBeamModel(Model& model, PagedKvCache& cache) : model_(model), cache_(cache) {}

  int vocab_size() const override { return model_.config().vocab_size; }
  int fork(int seq) override { return cache_.fork(seq); }
  void release(int seq) override { cache_.free(seq); }
  void step(std::span<const int> seqs, std::span<const int> tokens, std::span<float> logits) override {
    const std::size_t vocab = static_cast<std::size_t>(vocab_size());
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const int position = cache_.length(seqs[i]);
      model_.forward(cache_, seqs[i], {tokens.subspan(i, 1), std::span(&position, 1), {}, false},
                     logits.subspan(i * vocab, vocab));
      ++forwards_;
    }
  }
  int forwards() const { return forwards_; }

 private:
  Model& model_;
  PagedKvCache& cache_;
  int forwards_ = 0;
};

}  // namespace

DecodeRun decode_beam(Model& target, const GenerateOptions& options, const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const int width = options.sampling.beam_width;
  // Live beams, their forks during a step, and the root.
  PagedKvCache cache(target.kv_layout(options.kv_block_size),
                     kv_blocks_for(prompt_len + options.max_new_tokens, 4 * width + 2, options.kv_block_size));
  DecodeRun run;
  const auto start = Clock::now();
  std::vector<float> logits;
  const int root = prefill(target, cache, options.prompt_ids, logits);
  const auto decode_start = Clock::now();
  run.prefill_s = std::chrono::duration<double>(decode_start - start).count();

  CachedBeamModel model(target, cache);
  const int n_best = std::min(options.num_samples, width);
  const BeamResult result = beam_search(model, root, logits, options.sampling, options.max_new_tokens,
                                        c.eos_token_id, n_best);
  cache.free(root);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.target_forwards = 1 + model.forwards();
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
