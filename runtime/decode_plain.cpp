// The plain decoding loop: prefill once, then one target forward per token, the live samples
// of the request (forks of the shared prefill, each with its own Philox stream) side by side
// in that forward, kSampleWave at a time.
#include <algorithm>
#include <chrono>

#include "runtime/decoders.h"
#include "sampling/sampler.h"

namespace specula {

DecodeRun decode_plain(const Backend& target, const GenerateOptions& options, const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = target.config();
  const std::size_t vocab = static_cast<std::size_t>(c.vocab_size);
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const int num_samples = options.num_samples;
  const auto sampler = make_sampler(options.sampling);
  KvCache cache(target.kv_layout(options.kv_block_size), static_cast<int>(request_kv_blocks(options)));
  const auto workspace = target.make_workspace();
  const ForwardContext context{target, cache, *workspace};
  DecodeRun run;

  const auto start = Clock::now();
  std::vector<float> prompt_logits;
  const KvCache::SeqId root = prefill(context, options.prompt_ids, prompt_logits);
  run.target_forwards = 1;
  run.target_forwards_rows = prompt_len;
  const auto decode_start = Clock::now();
  run.prefill_s = std::chrono::duration<double>(decode_start - start).count();

  struct Sample {
    int index;
    KvCache::SeqId seq;
    Philox rng;
    int position = 0;  // of the token fed next
  };
  run.samples.resize(static_cast<std::size_t>(num_samples));
  std::vector<float> logits(vocab * static_cast<std::size_t>(std::min(num_samples, kSampleWave))), probs(vocab);
  std::vector<SequenceRows> parts;
  for (int first = 0; first < num_samples; first += kSampleWave) {
    std::vector<Sample> live;
    for (int s = first; s < std::min(num_samples, first + kSampleWave); ++s)
      live.push_back({s, cache.fork(root), Philox(options.seed, static_cast<uint64_t>(s))});
    for (std::size_t i = 0; i < live.size(); ++i) std::copy(prompt_logits.begin(), prompt_logits.end(), logits.begin() + i * vocab);
    while (!live.empty()) {
      // Sample every live row; finished samples leave, the rest feed their token together.
      std::vector<Sample> next;
      for (std::size_t i = 0; i < live.size(); ++i) {
        Sample& sample = live[i];
        sampler->distribution(std::span(logits).subspan(i * vocab, vocab), probs);
        const int token = sampler->draw(probs, sample.rng);
        std::vector<int>& ids = run.samples[static_cast<std::size_t>(sample.index)];
        if (emit_token(ids, token, options, c.eos_token_ids, sample.index, sink)) {
          cache.free(sample.seq);
          continue;
        }
        sample.position = prompt_len + static_cast<int>(ids.size()) - 1;
        next.push_back(sample);
      }
      live = std::move(next);
      if (live.empty()) break;
      parts.clear();
      for (const Sample& sample : live) {
        const std::vector<int>& ids = run.samples[static_cast<std::size_t>(sample.index)];
        parts.push_back({sample.seq, std::span(&ids.back(), 1), std::span(&sample.position, 1), {}, RowLogits::kLast});
      }
      context.run(parts, std::span(logits).first(live.size() * vocab));
      ++run.target_forwards;
      run.target_forwards_rows += static_cast<int>(live.size());
    }
  }
  cache.free(root);
  run.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  run.kv = cache.stats();
  return run;
}

}  // namespace specula
