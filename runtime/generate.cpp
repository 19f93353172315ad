#include "runtime/generate.h"

#include <omp.h>

#include "base/error.h"
#include "engine/cuda/device.h"
#include "runtime/decoders.h"
#include "sampling/sampler.h"

namespace specula {

bool emit_token(std::vector<int>& ids, int token, const GenerateOptions& options, int eos_id, int sample,
                const TokenSink& sink) {
  if (static_cast<int>(ids.size()) >= options.max_new_tokens || (!ids.empty() && ids.back() == eos_id)) return true;
  ids.push_back(token);
  if (sink) sink(sample, token);
  return token == eos_id || static_cast<int>(ids.size()) >= options.max_new_tokens;
}

int kv_blocks_for(int shared_tokens, int own_tokens, int sequences, int block_size) {
  const auto blocks = [block_size](int tokens) { return (tokens + block_size - 1) / block_size; };
  return blocks(shared_tokens) + (blocks(own_tokens) + 1) * sequences;
}

KvCache::SeqId prefill(const ForwardContext& context, std::span<const int> tokens, std::vector<float>& last_logits) {
  last_logits.assign(static_cast<std::size_t>(context.backend.config().vocab_size), 0.0f);
  const KvCache::SeqId seq = context.cache.create();
  if (tokens.empty()) return seq;
  std::vector<int> positions(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int>(i);
  context.run(SequenceRows{seq, tokens, positions, {}, RowLogits::kLast}, last_logits);
  return seq;
}

void check_draft_compatible(const Model& target, const Model& draft) {
  const ModelConfig &t = target.config(), &d = draft.config();
  SPECULA_CHECK(t.vocab_size == d.vocab_size, "--draft ", draft.dir(), ": vocabulary size ", d.vocab_size,
                " differs from the target's ", t.vocab_size);
  SPECULA_CHECK(t.bos_token_id == d.bos_token_id && t.eos_token_id == d.eos_token_id, "--draft ", draft.dir(),
                ": special ids (bos ", d.bos_token_id, ", eos ", d.eos_token_id, ") differ from the target's (bos ",
                t.bos_token_id, ", eos ", t.eos_token_id, ")");
  for (int id = 0; id < t.vocab_size; ++id) {
    SPECULA_CHECK(target.tokenizer().decode({id}) == draft.tokenizer().decode({id}), "--draft ", draft.dir(),
                  ": tokenizer differs from the target's at token ", id);
  }
}

void validate_generate_options(ModelStore& models, const GenerateOptions& o) {
  const Model& target = models.model(o.model_dir);
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(o.prompt_ids.size());
  SPECULA_CHECK(prompt_len > 0, "generate: the prompt is empty");
  SPECULA_CHECK(o.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got ", o.max_new_tokens);
  SPECULA_CHECK(o.num_samples >= 1, "--num-samples must be >= 1, got ", o.num_samples);
  SPECULA_CHECK(o.kv_block_size >= 1, "--kv-block-size must be >= 1, got ", o.kv_block_size);
  SPECULA_CHECK(o.threads >= 0, "--threads must be >= 0, got ", o.threads);
  SPECULA_CHECK(o.backend == "cpu", "--backend '", o.backend, "' is not available in this build (cpu)");
  SPECULA_CHECK(prompt_len + o.max_new_tokens <= c.max_position_embeddings, "generate: prompt (", prompt_len,
                " tokens) + --max-new-tokens (", o.max_new_tokens, ") exceeds max_position_embeddings (",
                c.max_position_embeddings, ") of ", o.model_dir);
  for (int id : o.prompt_ids)
    SPECULA_CHECK(id >= 0 && id < c.vocab_size, "--prompt-ids: id ", id, " is outside the vocabulary [0, ",
                  c.vocab_size, ")");
  validate_sampling_options(o.sampling);
  const DraftOptions& d = o.draft;
  SPECULA_CHECK(d.method == "none" || d.method == "model" || d.method == "ngram", "--draft-method must be model or ngram, got '",
                d.method, "'");
  SPECULA_CHECK(d.method != "model" || !d.model_dir.empty(), "--draft-method model needs --draft DIR");
  SPECULA_CHECK(d.gamma >= 1, "--gamma must be >= 1, got ", d.gamma);
  SPECULA_CHECK(d.tree_budget >= 0, "--tree-budget must be >= 0, got ", d.tree_budget);
  for (int b : d.tree) SPECULA_CHECK(b >= 1, "--tree: every branching factor must be >= 1, got ", b);
  SPECULA_CHECK(d.method == "none" || o.sampling.strategy != "beam",
                "--sampler beam cannot be combined with a drafter (--draft-method ", d.method, ")");
  SPECULA_CHECK(d.ngram_min >= 1 && d.ngram_min <= d.ngram_max, "--ngram-min (", d.ngram_min,
                ") must be >= 1 and <= --ngram-max (", d.ngram_max, ")");
  if (d.method == "model") check_draft_compatible(target, draft_model(models, d).model());
}

const Backend& draft_model(ModelStore& models, const DraftOptions& draft) {
  std::optional<DType> as;
  if (draft.weights == "f32") as = DType::F32;
  else if (draft.weights == "f16") as = DType::F16;
  else if (draft.weights == "bf16") as = DType::BF16;
  else SPECULA_CHECK(draft.weights == "stored", "--draft-weights must be stored, f32, f16 or bf16, got '", draft.weights, "'");
  return models.get(draft.model_dir, as);
}

std::string accelerator_name() { return cuda_device_count() > 0 ? "cuda" : "none"; }

nlohmann::json generate(ModelStore& models, const GenerateOptions& options, const TokenSink& sink) {
  validate_generate_options(models, options);
  const Backend& target = models.get(options.model_dir);
  if (options.threads > 0) omp_set_num_threads(options.threads);

  DecodeRun run;
  if (options.sampling.strategy == "beam") {
    run = decode_beam(target, options, sink);
  } else if (options.draft.method == "none") {
    run = decode_plain(target, options, sink);
  } else {
    run = decode_speculative(models, target, options, sink);
  }

  int new_tokens = 0;
  for (const auto& ids : run.samples) new_tokens += static_cast<int>(ids.size());
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const SamplingOptions& s = options.sampling;
  nlohmann::json sampler = {{"strategy", s.strategy}};
  if (s.strategy == "sample") {
    sampler.update({{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
                    {"seed", options.seed}});
  } else if (s.strategy == "beam") {
    sampler.update({{"beam_width", s.beam_width}, {"length_penalty", s.length_penalty}});
  }
  nlohmann::json stats = {
      {"prompt_tokens", prompt_len},
      {"new_tokens", new_tokens},
      {"time_s", run.prefill_s + run.decode_s},
      {"prefill_tokens_per_s", run.prefill_s > 0 ? prompt_len / run.prefill_s : 0.0},
      {"decode_tokens_per_s", run.decode_s > 0 ? new_tokens / run.decode_s : 0.0},
      {"target_forwards", run.target_forwards},
      {"target_rows", run.target_forwards_rows},
      {"sampler", sampler},
      {"kv", {{"block_size", options.kv_block_size}, {"blocks_peak", run.kv.blocks_peak},
              {"blocks_in_use_at_end", run.kv.blocks_in_use}}},
  };
  if (run.extra.is_object()) stats.update(run.extra);
  nlohmann::json out = {{"ids", run.samples.at(0)}, {"text", target.model().tokenizer().decode(run.samples.at(0))},
                        {"stats", stats}};
  if (run.samples.size() > 1) out["samples"] = run.samples;
  return out;
}

}  // namespace specula
