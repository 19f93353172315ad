// The plain decoding loop: prefill once, then one target forward per token, for each of
// num_samples continuations forked from the shared prefill.
#include <chrono>

#include "runtime/decoders.h"
#include "sampling/sampler.h"

namespace specula {

DecodeRun decode_plain(Model& target, const GenerateOptions& options, const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const auto sampler = make_sampler(options.sampling);
  PagedKvCache cache(target.kv_layout(options.kv_block_size),
                     kv_blocks_for(prompt_len + options.max_new_tokens, 2, options.kv_block_size));
  DecodeRun run;

  const auto start = Clock::now();
  std::vector<float> prompt_logits;
  const int root = prefill(target, cache, options.prompt_ids, prompt_logits);
  run.target_forwards = 1;
  const auto decode_start = Clock::now();
  run.prefill_s = std::chrono::duration<double>(decode_start - start).count();

  std::vector<float> logits(prompt_logits.size()), probs(prompt_logits.size());
  run.samples.resize(static_cast<std::size_t>(options.num_samples));
  for (int s = 0; s < options.num_samples; ++s) {
    Philox rng(options.seed, static_cast<uint64_t>(s));
    const int seq = cache.fork(root);
    logits = prompt_logits;
    std::vector<int>& ids = run.samples[s];
    for (;;) {
      sampler->distribution(logits, probs);
      const int token = sampler->draw(probs, rng);
      if (emit_token(ids, token, options, c.eos_token_id, s, sink)) break;
      const int pos = prompt_len + static_cast<int>(ids.size()) - 1;
      target.forward(cache, seq, {std::span(&ids.back(), 1), std::span(&pos, 1), {}, false}, logits);
      ++run.target_forwards;
    }
    cache.free(seq);
  }
  cache.free(root);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.kv = cache.stats();
  return run;
}

}  // namespace specula
