#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int argmax(std::span<const float> v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

nlohmann::json generate(ModelStore& models, const GenerateOptions& options, const TokenSink& sink) {
  Model& target = models.get(options.model_dir);
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  SPECULA_CHECK(prompt_len > 0, "generate: the prompt is empty");
  SPECULA_CHECK(options.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got ", options.max_new_tokens);
  SPECULA_CHECK(prompt_len + options.max_new_tokens <= c.max_position_embeddings, "generate: prompt (", prompt_len,
                " tokens) + --max-new-tokens (", options.max_new_tokens, ") exceeds max_position_embeddings (",
                c.max_position_embeddings, ") of ", options.model_dir);
  SPECULA_CHECK(options.kv_block_size >= 1, "--kv-block-size must be >= 1, got ", options.kv_block_size);

  const int bs = options.kv_block_size;
  const int blocks_per_seq = (prompt_len + options.max_new_tokens + bs) / bs + 1;
  PagedKvCache cache(target.kv_layout(bs), blocks_per_seq * (options.num_samples + 1));
  const int vocab = c.vocab_size;

  const auto start = Clock::now();
  std::vector<int> positions(static_cast<std::size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) positions[i] = i;
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  const int root = cache.create();
  target.forward(cache, root, {options.prompt_ids, positions, {}, false}, logits);
  const double prefill_s = seconds_since(start);

  const auto decode_start = Clock::now();
  std::vector<std::vector<int>> samples(static_cast<std::size_t>(options.num_samples));
  int decode_forwards = 0;
  for (int s = 0; s < options.num_samples; ++s) {
    const int seq = cache.fork(root);
    std::vector<float> next = logits;
    std::vector<int>& ids = samples[s];
    while (static_cast<int>(ids.size()) < options.max_new_tokens) {
      const int token = argmax(next);
      ids.push_back(token);
      if (sink) sink(s, token);
      if (token == c.eos_token_id || static_cast<int>(ids.size()) == options.max_new_tokens) break;
      const int pos = prompt_len + static_cast<int>(ids.size()) - 1;
      target.forward(cache, seq, {std::span(&ids.back(), 1), std::span(&pos, 1), {}, false}, next);
      ++decode_forwards;
    }
    cache.free(seq);
  }
  const double decode_s = seconds_since(decode_start);
  cache.free(root);

  int new_tokens = 0;
  for (const auto& ids : samples) new_tokens += static_cast<int>(ids.size());
  nlohmann::json stats = {
      {"prompt_tokens", prompt_len},
      {"new_tokens", new_tokens},
      {"time_s", prefill_s + decode_s},
      {"prefill_tokens_per_s", prefill_s > 0 ? prompt_len / prefill_s : 0.0},
      {"decode_tokens_per_s", decode_s > 0 ? new_tokens / decode_s : 0.0},
      {"target_forwards", 1 + decode_forwards},
      {"kv", {{"block_size", bs}, {"blocks_peak", cache.stats().blocks_peak},
              {"blocks_in_use_at_end", cache.stats().blocks_in_use}}},
  };
  nlohmann::json out = {{"ids", samples[0]}, {"text", target.tokenizer().decode(samples[0])}, {"stats", stats}};
  if (options.num_samples > 1) out["samples"] = samples;
  return out;
}

}  // namespace specula
