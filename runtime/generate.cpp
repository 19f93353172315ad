#include "runtime/generate.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <string>

#include "base/error.h"
#include "base/memory.h"
#include "engine/cuda/device.h"
#include "runtime/decoders.h"
#include "runtime/scheduler.h"
#include "runtime/scheduler_limits.h"
#include "sampling/sampler.h"

namespace specula {

bool emit_token(std::vector<int>& ids, int token, const GenerateOptions& options, std::span<const int> eos_ids,
                int sample, const TokenSink& sink, const TokenLogprob* logprob) {
  const auto is_eos = [&](int t) { return std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end(); };
  if (static_cast<int>(ids.size()) >= options.max_new_tokens || (!ids.empty() && is_eos(ids.back()))) return true;
  ids.push_back(token);
  if (sink) sink(sample, token, logprob);
  return is_eos(token) || static_cast<int>(ids.size()) >= options.max_new_tokens;
}

namespace {

// Bytes of a KV pool of `blocks` blocks of `model` (every layer's K and V pages, in the request's
// KV dtype, int8 scales included).
long long kv_pool_bytes(const Model& model, const GenerateOptions& o, long long blocks) {
  KvLayout l = model.kv_layout(o.kv_block_size);
  if (o.kv_dtype) l.dtype = *o.kv_dtype;
  const long long per_block = static_cast<long long>(l.block_bytes());
  return blocks > LLONG_MAX / per_block ? LLONG_MAX : blocks * per_block;
}

}  // namespace

KvCache::SeqId prefill(const ForwardContext& context, std::span<const int> tokens, std::vector<float>& last_logits) {
  last_logits.assign(static_cast<std::size_t>(context.backend.config().vocab_size), 0.0f);
  const KvCache::SeqId seq = context.cache.create();
  if (tokens.empty()) return seq;
  std::vector<int> positions(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int>(i);
  context.run(SequenceRows{seq, tokens, positions, {}, RowLogits::kLast}, last_logits);
  return seq;
}

void check_draft_compatible(const Model& target, const Model& draft, const OptionNames& names) {
  const ModelConfig &t = target.config(), &d = draft.config();
  SPECULA_CHECK(t.vocab_size == d.vocab_size, names.at("draft.path"), " ", draft.dir(), ": vocabulary size ",
                d.vocab_size, " differs from the target's ", t.vocab_size);
  SPECULA_CHECK(t.bos_token_id == d.bos_token_id && t.eos_token_id == d.eos_token_id, names.at("draft.path"), " ",
                draft.dir(), ": special ids (bos ", d.bos_token_id, ", eos ", d.eos_token_id,
                ") differ from the target's (bos ", t.bos_token_id, ", eos ", t.eos_token_id, ")");
  // One fingerprint per tokenizer, computed at load (pieces, added tokens, normalisation).
  SPECULA_CHECK(target.tokenizer().fingerprint() == draft.tokenizer().fingerprint(), names.at("draft.path"), " ",
                draft.dir(), ": tokenizer differs from the target's (fingerprints ", draft.tokenizer().fingerprint(),
                " and ", target.tokenizer().fingerprint(), ")");
}

void validate_generate_options(ModelStore& models, const GenerateOptions& o, const OptionNames& names) {
  validate_options(o, names);
  const Model& target = models.model(o.model_dir);
  const ModelConfig& c = target.config();
  const int prompt_len = static_cast<int>(o.prompt_ids.size());
  SPECULA_CHECK(prompt_len > 0, names.at("prompt"), ": the prompt is empty");
  SPECULA_CHECK(static_cast<long>(prompt_len) + o.max_new_tokens <= c.max_position_embeddings, names.at("prompt"),
                " (", prompt_len, " tokens) + ", names.name("run.max_new_tokens"), " (", o.max_new_tokens,
                ") exceeds max_position_embeddings (", c.max_position_embeddings, ") of ", o.model_dir);
  for (int id : o.prompt_ids)
    SPECULA_CHECK(id >= 0 && id < c.vocab_size, names.at("prompt"), ": id ", id, " is outside the vocabulary [0, ",
                  c.vocab_size, ")");
  validate_logit_controls(o.controls, c.vocab_size, names);
  const Model* draft = o.draft.method == DraftMethod::kModel ? &draft_model(models, o.draft, o.backend).model() : nullptr;
  if (draft) check_draft_compatible(target, *draft, names);
  if (drafts_with_eagle_head(o.draft.method))  // refuses a misfit
    models.head(o.draft.model_dir, o.model_dir, o.backend, head_kind(o.draft.method));
  if (o.draft.method == DraftMethod::kMedusa) {  // refuses a misfit, and a tree deeper than the heads
    const int heads = models.medusa(o.draft.model_dir, o.model_dir, o.backend).config().num_heads;
    const bool chain = o.draft.tree.empty();
    const int depth = chain ? o.draft.gamma : static_cast<int>(o.draft.tree.size());
    SPECULA_CHECK(depth <= heads, names.at(chain ? "draft.gamma" : "draft.tree"), ": ",
                  chain ? "a chain of " : "a tree ", depth, chain ? " tokens" : " levels deep",
                  " needs as many Medusa heads, but ", o.draft.model_dir, " has ", heads,
                  " (config.json medusa_num_heads)");
  }

  // A pool set by the user holds at least what one request needs alone.
  SPECULA_CHECK(o.kv_pool_blocks == 0 || o.kv_pool_blocks >= request_min_kv_blocks(o), names.at("run.kv_pool_blocks"), " ",
                o.kv_pool_blocks, " is below the ", request_min_kv_blocks(o), " blocks a request of ", prompt_len,
                " prompt tokens and ", o.max_new_tokens, " new tokens needs alone (", names.name("run.kv_block_size"),
                " ", o.kv_block_size, ")");
  // The KV pools (target, and the draft's of the same size) must fit in the memory there is.
  const long long blocks = kv_pool_blocks_or(o, request_kv_blocks(o, std::min(o.num_samples, kSampleWave)));
  long long bytes = kv_pool_bytes(target, o, blocks);
  if (draft) bytes = std::min(bytes, LLONG_MAX / 2) + std::min(kv_pool_bytes(*draft, o, blocks), LLONG_MAX / 2);
  // Host memory bounds the CPU's pools (a device backend plans its own memory up front).
  const long long available = o.backend == BackendKind::kCpu ? available_memory_bytes() : LLONG_MAX;
  const auto gib = [](long long b) { return static_cast<double>(b) / (1LL << 30); };
  std::string sizes = names.name("run.max_new_tokens") + " " + std::to_string(o.max_new_tokens) + ", " +
                      (o.sampling.strategy == Strategy::kBeam
                           ? names.name("sampling.beam_width") + " " + std::to_string(o.sampling.beam_width)
                           : names.name("run.num_samples") + " " + std::to_string(o.num_samples));
  if (o.draft.method != DraftMethod::kNone) sizes += ", " + std::to_string(draft_tree_nodes(o.draft)) + " drafted nodes";
  SPECULA_CHECK(blocks <= INT_MAX && bytes <= available, names.at("run.max_new_tokens"), ": the request (", sizes,
                ", ", names.name("run.kv_block_size"), " ", o.kv_block_size, ") needs a KV pool of ", gib(bytes),
                " GiB, more than the ", gib(available), " GiB of memory available");
}

const Backend& draft_model(ModelStore& models, const DraftOptions& draft, BackendKind kind) {
  return models.get(draft.model_dir, draft.weights, kind);
}

int request_threads(const GenerateOptions& options) {
  static const int process_default = omp_get_max_threads();  // first call: before generate() sets a count
  return options.threads > 0 ? options.threads : process_default;
}

std::string accelerator_name() { return cuda_device_count() > 0 ? "cuda" : "none"; }

SchedulerLimits single_request_limits(const GenerateOptions& options) {
  SchedulerLimits limits;
  limits.max_sequences = std::min(options.num_samples, kSampleWave);
  limits.kv_blocks = kv_pool_blocks_or(options, request_kv_blocks(options, limits.max_sequences));
  limits.max_rows = std::max(limits.max_rows, 1 + max_tree_nodes(options.draft));
  return limits;
}

nlohmann::json request_json(const Model& target, const GenerateOptions& options, const RequestOutcome& out,
                            const KvStats& kv, int draft_blocks_in_use) {
  int new_tokens = 0;
  for (const auto& ids : out.samples) new_tokens += static_cast<int>(ids.size());
  const int prompt_len = static_cast<int>(options.prompt_ids.size());
  const double queue_s = out.started_s - out.submitted_s, prefill_s = out.prefilled_s - out.started_s,
               decode_s = out.finished_s - out.prefilled_s;
  const int decoded_tokens = new_tokens - out.tokens_from_prompt;
  const KvStats& reported_kv = out.own_kv ? *out.own_kv : kv;  // a beam search ran in a cache of its own
  const SamplingOptions& s = options.sampling;
  nlohmann::json sampler = {{"strategy", name_of(s.strategy)}};
  if (s.strategy == Strategy::kSample) {
    sampler.update({{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
                    {"seed", options.seed}});
  } else if (s.strategy == Strategy::kBeam) {
    sampler.update({{"beam_width", s.beam_width}, {"length_penalty", s.length_penalty}});
  }
  nlohmann::json stats = {
      {"prompt_tokens", prompt_len},
      {"new_tokens", new_tokens},
      {"time_s", queue_s + prefill_s + decode_s},
      {"queue_s", queue_s},
      {"decode_s", decode_s},
      {"prefill_tokens_per_s", prefill_s > 0 ? prompt_len / prefill_s : 0.0},
      {"decode_tokens_per_s", decode_s > 0 ? decoded_tokens / decode_s : 0.0},
      {"target_forwards", out.target_forwards},
      {"target_rows", out.target_rows},
      {"sampler", sampler},
      {"kv", {{"block_size", options.kv_block_size}, {"pool_blocks", reported_kv.blocks_total},
              {"blocks_peak", reported_kv.blocks_peak},
              {"blocks_in_use_at_end", reported_kv.blocks_in_use}}},
  };
  if (options.kv_dtype) stats["kv"]["dtype"] = name_of(*options.kv_dtype);
  stats["preemptions"] = out.preemptions;
  if (out.extra.is_object()) stats.update(out.extra);
  const auto& defaults = target.config().generation_defaults;
  if (!defaults.empty()) {  // reported so a user sees what the model suggests; never applied
    nlohmann::json& reported = stats["generation_config"] = nlohmann::json::object();
    for (const auto& [key, value] : defaults) reported[key] = nlohmann::json::parse(value);
  }
  const DraftOptions& d = options.draft;
  if (d.method != DraftMethod::kNone && s.strategy != Strategy::kBeam) {
    stats.update(speculative_stats_json(d, out.spec, new_tokens, out.draft_forwards));
    stats["draft"]["gamma_policy"] = name_of(options.gamma_policy);
    stats["draft"]["verify_rule"] = name_of(options.verify_rule);
    if (d.method == DraftMethod::kModel) stats["draft"]["kv_blocks_in_use_at_end"] = draft_blocks_in_use;
  }
  // Each sample's text (cut before its stop string) and why it ended.
  std::vector<std::string> texts;
  std::vector<std::string> reasons;
  nlohmann::json stops = nlohmann::json::array();
  const std::span<const int> eos = target.config().eos_token_ids;
  for (std::size_t i = 0; i < out.samples.size(); ++i) {
    const std::vector<int>& ids = out.samples[i];
    const StopStrings* cut = out.texts.empty() ? nullptr : &out.texts[i];
    texts.push_back(cut ? std::string(cut->text()) : target.tokenizer().decode(ids));
    const bool eos_end = !ids.empty() && std::find(eos.begin(), eos.end(), ids.back()) != eos.end();
    const bool cut_short = out.cancelled && static_cast<int>(ids.size()) < options.max_new_tokens;
    reasons.push_back(cut && cut->matched() ? "stop_string" : eos_end ? "eos" : cut_short ? "cancelled" : "length");
    if (cut) stops.push_back(cut->matched() ? nlohmann::json(*cut->matched()) : nlohmann::json());
  }
  nlohmann::json result = {{"ids", out.samples.at(0)}, {"text", texts.at(0)}, {"finish_reason", reasons.at(0)},
                           {"stats", stats}};
  if (!out.texts.empty()) result["stop_string"] = stops.at(0);
  if (out.samples.size() > 1) {
    result["samples"] = out.samples;
    result["sample_texts"] = texts;
    result["finish_reasons"] = reasons;
    if (!out.texts.empty()) result["stop_strings"] = stops;
  }
  if (options.logprobs && !out.logprobs.empty()) {
    // Per token: {"token", "logprob", "top": [{"token", "logprob"}, ...]}; -inf prints as null.
    const auto content = [](const std::vector<TokenLogprob>& tokens) {
      nlohmann::json list = nlohmann::json::array();
      for (const TokenLogprob& t : tokens) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [token, logprob] : t.top) top.push_back({{"token", token}, {"logprob", logprob}});
        list.push_back({{"token", t.token}, {"logprob", t.logprob}, {"top", std::move(top)}});
      }
      return list;
    };
    result["logprobs"] = {{"source", name_of(options.logprobs_source)}, {"top", *options.logprobs},
                          {"content", content(out.logprobs.at(0))}};
    if (out.logprobs.size() > 1) {
      nlohmann::json samples = nlohmann::json::array();
      for (const auto& tokens : out.logprobs) samples.push_back(content(tokens));
      result["logprobs"]["samples"] = std::move(samples);
    }
  }
  return result;
}

nlohmann::json generate(ModelStore& models, const GenerateOptions& options, const TokenSink& sink) {
  validate_generate_options(models, options, cli_option_names());
  omp_set_num_threads(request_threads(options));  // every request: none inherits an earlier one's count
  // One decoding path: a lone request is the scheduler with one request.
  Scheduler scheduler(models, options, single_request_limits(options));
  const int request = scheduler.submit(options, 0, sink);
  scheduler.run();
  return request_json(models.model(options.model_dir), options, scheduler.outcome(request), scheduler.kv_stats(),
                      scheduler.draft_blocks_in_use());
}

}  // namespace specula
