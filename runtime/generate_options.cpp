#include "runtime/generate_options.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <map>

#include "base/error.h"
#include "draft/model_drafter.h"
#include "draft/sequoia_tree.h"
#include "engine/cuda/device.h"
#include "sampling/sampler.h"

namespace specula {

OptionNames cli_option_names() {
  static const std::map<std::string, std::string, std::less<>> flags = {
      {"target.path", "--model"},
      {"target.weights", "--weights"},
      {"prompt", "--prompt"},
      {"run.max_new_tokens", "--max-new-tokens"},
      {"run.num_samples", "--num-samples"},
      {"run.seeds", "--seed"},
      {"run.kv_block_size", "--kv-block-size"},
      {"run.kv_pool_blocks", "--kv-pool-blocks"},
      {"run.kv_dtype", "--kv-dtype"},
      {"run.threads", "--threads"},
      {"run.backend", "--backend"},
      {"sampling.strategy", "--sampler"},
      {"sampling.temperature", "--temperature"},
      {"sampling.top_k", "--top-k"},
      {"sampling.top_p", "--top-p"},
      {"sampling.min_p", "--min-p"},
      {"sampling.beam_width", "--beam-width"},
      {"sampling.length_penalty", "--length-penalty"},
      {"sampling.repetition_penalty", "--repetition-penalty"},
      {"sampling.frequency_penalty", "--frequency-penalty"},
      {"sampling.presence_penalty", "--presence-penalty"},
      {"sampling.no_repeat_ngram_size", "--no-repeat-ngram-size"},
      {"sampling.logit_bias", "--logit-bias"},
      {"sampling.banned_tokens", "--banned-tokens"},
      {"sampling.min_new_tokens", "--min-new-tokens"},
      {"sampling.stop_strings", "--stop"},
      {"draft.method", "--draft-method"},
      {"draft.path", "--draft"},
      {"draft.weights", "--draft-weights"},
      {"draft.gamma", "--gamma"},
      {"draft.tree", "--tree"},
      {"draft.budget", "--tree-budget"},
      {"draft.sequoia", "--sequoia"},
      {"draft.siblings", "--siblings"},
      {"draft.adaptive", "--adaptive"},
      {"draft.gamma_policy", "--gamma-policy"},
      {"draft.stop_below", "--stop-below"},
      {"draft.max_batch", "--draft-max-batch"},
      {"draft.ngram_min", "--ngram-min"},
      {"draft.ngram_max", "--ngram-max"},
      {"verify.rule", "--verify-rule"},
      {"output.logprobs", "--logprobs"},
      {"output.logprobs_source", "--logprobs-source"},
  };
  OptionNames names;
  names.name = [](std::string_view key) {
    const auto it = flags.find(key);
    return it == flags.end() ? std::string(key) : it->second;
  };
  return names;
}

KvLayout request_kv_layout(const Backend& backend, const GenerateOptions& options) {
  KvLayout layout = backend.kv_layout(options.kv_block_size);
  if (options.kv_dtype) {
    SPECULA_CHECK(!layout.device_pages || layout.dtype == *options.kv_dtype, "backend '", name_of(backend.kind()),
                  "': KV pages in ", name_of(*options.kv_dtype), " are not available (its pages are ",
                  name_of(layout.dtype), ")");
    layout.dtype = *options.kv_dtype;
  }
  return layout;
}

int draft_tree_nodes(const DraftOptions& d) {
  if (d.method == DraftMethod::kNgram) return d.gamma;
  if (d.tree_budget > 0) return d.tree_budget;
  // An adaptive chain starts at gamma and grows up to kMaxAdaptiveGamma; a fixed one carries
  // its first token's siblings beside it.
  if (d.tree.empty()) return d.adaptive ? std::max(d.gamma, ModelDrafter::kMaxAdaptiveGamma) : d.gamma + d.siblings;
  return static_tree_nodes(d.tree);
}

int static_tree_nodes(std::span<const int> branching) {
  long long nodes = 0, level = 1;
  for (int b : branching) {
    level = std::min<long long>(level * std::max(b, 0), INT_MAX);  // both factors <= INT_MAX: no overflow
    nodes = std::min<long long>(nodes + level, INT_MAX);
  }
  return static_cast<int>(nodes);
}

namespace {

// An option given (names.given) where it does not apply: refused, naming it and why.
void refuse_given(const OptionNames& names, std::initializer_list<const char*> keys, bool applies,
                  const std::string& why) {
  if (applies) return;
  for (const char* key : keys)
    SPECULA_CHECK(!names.given(key), names.at(key), " does not apply: ", why);
}

}  // namespace

void validate_options(const GenerateOptions& o, const OptionNames& names) {
  const auto in_range = [&](const char* key, long long value, long long min, long long max) {
    SPECULA_CHECK(value >= min && value <= max, names.at(key), " must be in [", min, ", ", max, "], got ", value);
  };
  in_range("run.max_new_tokens", o.max_new_tokens, 1, INT_MAX);
  in_range("run.num_samples", o.num_samples, 1, kMaxNumSamples);
  in_range("run.kv_block_size", o.kv_block_size, 1, kMaxKvBlockSize);
  in_range("run.kv_pool_blocks", o.kv_pool_blocks, 0, INT_MAX);
  SPECULA_CHECK(o.kv_pool_blocks == 0 || o.sampling.strategy != Strategy::kBeam, names.at("run.kv_pool_blocks"), " ",
                o.kv_pool_blocks, " does not apply to ", names.name("sampling.strategy"),
                " beam (a beam search runs in a cache of its own)");
  in_range("run.threads", o.threads, 0, kMaxThreads);
  // The CUDA backend made for a request keeps its pages in bf16 (CudaOptions::kv_dtype).
  SPECULA_CHECK(!o.kv_dtype || o.backend == BackendKind::kCpu || *o.kv_dtype == KvDType::kBF16,
                names.at("run.kv_dtype"), " ", name_of(*o.kv_dtype), " is not available on ", names.name("run.backend"),
                " ", name_of(o.backend), " (its KV pages are bf16; f32 and int8 pages are the cpu backend's)");
  SPECULA_CHECK(o.backend == BackendKind::kCpu || cuda_device_count() > 0, names.at("run.backend"), " ",
                name_of(o.backend), ": no usable GPU (", cuda_unavailable_reason(), "); use cpu");
  for (const auto& [key, weights] : {std::pair{"target.weights", o.weights}, std::pair{"draft.weights", o.draft.weights}}) {
    const std::string why = matrices_unsupported(o.backend, weights);
    SPECULA_CHECK(why.empty(), names.at(key), " ", weights_name(weights), ": ", why);
  }
  validate_sampling_options(o.sampling, names);
  const SamplingOptions& s = o.sampling;
  SPECULA_CHECK(s.temperature == 0.0f || s.temperature >= kMinTemperature, names.at("sampling.temperature"),
                " must be 0 (greedy) or >= ", kMinTemperature, ", got ", s.temperature);
  in_range("sampling.beam_width", s.beam_width, 1, kMaxBeamWidth);

  const DraftOptions& d = o.draft;
  in_range("draft.gamma", d.gamma, 1, kMaxGamma);
  in_range("draft.budget", d.tree_budget, 0, kMaxTreeNodes);
  in_range("draft.siblings", d.siblings, 0, kMaxTreeNodes);
  const bool runs_model = d.method == DraftMethod::kModel || drafts_with_eagle_head(d.method);
  SPECULA_CHECK(d.siblings == 0 || (runs_model && d.drafts_chain() && !d.adaptive &&
                                    o.gamma_policy == GammaPolicy::kFixed && o.sampling.strategy != Strategy::kBeam),
                names.at("draft.siblings"), " ", d.siblings, " adds candidates for the first token of a draft model's ",
                "fixed-length chain: it needs ", names.name("draft.path"), " DIR and excludes ", names.name("draft.tree"),
                ", ", names.name("draft.budget"), ", ", names.name("draft.adaptive"), ", ", names.name("draft.gamma_policy"),
                " load (which chooses its own) and ", names.name("sampling.strategy"), " beam");
  for (int b : d.tree) SPECULA_CHECK(b >= 1, names.at("draft.tree"), ": every branching factor must be >= 1, got ", b);
  SPECULA_CHECK(d.tree.size() <= static_cast<std::size_t>(kMaxGamma), names.at("draft.tree"), " has ", d.tree.size(),
                " levels, more than ", kMaxGamma);
  if (!d.tree.empty() && d.tree_budget == 0) {
    const int nodes = static_tree_nodes(d.tree);
    SPECULA_CHECK(nodes <= kMaxTreeNodes, names.at("draft.tree"), " has ", nodes, " nodes, more than ", kMaxTreeNodes);
  }
  if (!d.sequoia.empty()) {
    const std::string where = names.at("draft.sequoia");
    validate_rank_acceptance(d.sequoia, where.c_str());
    SPECULA_CHECK(d.sequoia.size() <= static_cast<std::size_t>(kMaxSequoiaDepths), where, " has ", d.sequoia.size(),
                  " rows (depths), more than ", kMaxSequoiaDepths);
    for (const std::vector<double>& row : d.sequoia)
      SPECULA_CHECK(row.size() <= static_cast<std::size_t>(kMaxSequoiaRanks), where, " has a row of ", row.size(),
                    " ranks, more than ", kMaxSequoiaRanks);
    SPECULA_CHECK(runs_model && d.tree.empty() && d.tree_budget >= 1 &&
                      d.tree_budget <= kMaxSequoiaNodes,
                  where, " chooses a draft model's static tree of ", names.name("draft.budget"),
                  " nodes: it needs ", names.name("draft.path"), " DIR and ", names.name("draft.budget"), " in [1, ",
                  kMaxSequoiaNodes, "] (got ", d.tree_budget, ") and excludes ", names.name("draft.tree"));
  }
  in_range("draft.ngram_max", d.ngram_max, 1, kMaxNgram);
  SPECULA_CHECK(d.ngram_min >= 1 && d.ngram_min <= d.ngram_max, names.at("draft.ngram_max"), " (", d.ngram_max,
                ") must be >= ", names.name("draft.ngram_min"), " (", d.ngram_min, ") and that >= 1");
  SPECULA_CHECK(o.gamma_policy == GammaPolicy::kFixed ||
                    (d.method != DraftMethod::kNone && d.drafts_chain() && !d.adaptive),
                names.at("draft.gamma_policy"), " ", name_of(o.gamma_policy),
                " chooses a chain's length each step: it needs a chain drafter (", names.name("draft.method"),
                " model, ngram, eagle3, eagle or medusa) and excludes ", names.name("draft.tree"), ", ",
                names.name("draft.budget"), " and ", names.name("draft.adaptive"));
  SPECULA_CHECK(o.gamma_policy == GammaPolicy::kFixed || o.sampling.strategy != Strategy::kBeam,
                names.at("draft.gamma_policy"), " ", name_of(o.gamma_policy), " cannot be combined with ",
                names.name("sampling.strategy"), " beam (beam steps are one unit)");
  const LengthThreshold& t = o.length_threshold;
  SPECULA_CHECK(t.stop_below >= 0 && t.stop_below <= 1, names.at("draft.stop_below"), " must be in [0, 1], got ",
                t.stop_below);
  in_range("draft.max_batch", t.max_batch, 0, INT_MAX);

  SPECULA_CHECK(o.verify_rule != VerifyRule::kBlock ||
                    (d.method != DraftMethod::kNone && d.drafts_chain() && d.siblings == 0 &&
                     o.gamma_policy == GammaPolicy::kFixed && s.strategy != Strategy::kBeam),
                names.at("verify.rule"), " block verifies chains: it needs a chain drafter (", names.name("draft.method"),
                " model or ngram) and excludes ", names.name("draft.tree"), ", ", names.name("draft.budget"), ", ",
                names.name("draft.siblings"), ", ", names.name("draft.gamma_policy"), " load (which adds siblings) and ",
                names.name("sampling.strategy"), " beam");
  // Traversal takes any tree in every sibling-draw mode: trees, budgets, siblings and the load policy apply.
  SPECULA_CHECK(o.verify_rule != VerifyRule::kTraversal ||
                    (d.method != DraftMethod::kNone && s.strategy != Strategy::kBeam),
                names.at("verify.rule"), " traversal verifies drafted trees: it needs a drafter (",
                names.name("draft.method"), ") and excludes ", names.name("sampling.strategy"), " beam");

  validate_logit_controls(o.controls, INT_MAX, names);

  if (o.logprobs) in_range("output.logprobs", *o.logprobs, 0, kMaxLogprobs);
  SPECULA_CHECK(!o.logprobs || s.strategy != Strategy::kBeam, names.at("output.logprobs"),
                " does not apply to ", names.name("sampling.strategy"), " beam (a beam's tokens are not drawn one by one)");

  SPECULA_CHECK(o.stop_strings.size() <= static_cast<std::size_t>(kMaxStopStrings), names.at("sampling.stop_strings"),
                ": ", o.stop_strings.size(), " stop strings, more than ", kMaxStopStrings);
  for (const std::string& stop : o.stop_strings)
    SPECULA_CHECK(!stop.empty() && stop.size() <= static_cast<std::size_t>(kMaxStopBytes),
                  names.at("sampling.stop_strings"), ": a stop string must hold 1 to ", kMaxStopBytes,
                  " bytes, got ", stop.size());

  // Options given where they do not apply (the CLI knows which flags were given).
  refuse_given(names, {"sampling.temperature", "sampling.top_k", "sampling.top_p", "sampling.min_p", "run.seeds"},
               s.strategy == Strategy::kSample, "it needs " + names.name("sampling.strategy") + " sample");
  refuse_given(names, {"sampling.beam_width", "sampling.length_penalty"}, s.strategy == Strategy::kBeam,
               "it needs " + names.name("sampling.strategy") + " beam");
  refuse_given(names, {"draft.gamma"}, d.method != DraftMethod::kNone && d.drafts_chain(),
               "it sets the length of a drafted chain (" + names.name("draft.path") + " DIR or " +
                   names.name("draft.method") + " ngram, without " + names.name("draft.tree") + " or " +
                   names.name("draft.budget") + ")");
  refuse_given(names, {"draft.stop_below", "draft.max_batch"}, o.gamma_policy == GammaPolicy::kThreshold,
               "it needs " + names.name("draft.gamma_policy") + " threshold");
  refuse_given(names, {"output.logprobs_source"}, o.logprobs.has_value(),
               "it needs " + names.name("output.logprobs"));
  refuse_given(names, {"verify.rule"}, d.method != DraftMethod::kNone && s.strategy != Strategy::kBeam,
               "it needs a drafter (" + names.name("draft.path") + " DIR or " + names.name("draft.method") +
                   " ngram) and a sampler other than beam");
  refuse_given(names, {"draft.ngram_min", "draft.ngram_max"}, d.method == DraftMethod::kNgram,
               "it needs " + names.name("draft.method") + " ngram");
  refuse_given(names, {"draft.path"},
               d.method == DraftMethod::kModel || drafts_with_eagle_head(d.method) || d.method == DraftMethod::kMedusa,
               "it needs " + names.name("draft.method") + " model, eagle3, eagle or medusa");
  refuse_given(names, {"draft.weights"}, d.method == DraftMethod::kModel,
               "it needs a draft model (" + names.name("draft.path") + ")");
  if (d.method == DraftMethod::kNone) {
    SPECULA_CHECK(d.drafts_chain() && !d.adaptive,
                  names.at(!d.tree.empty() ? "draft.tree" : d.tree_budget ? "draft.budget" : "draft.adaptive"),
                  " needs a drafter (", names.name("draft.path"), " DIR or ", names.name("draft.method"), " ngram)");
    return;
  }
  const bool head = drafts_with_eagle_head(d.method) || d.method == DraftMethod::kMedusa;
  SPECULA_CHECK((d.method != DraftMethod::kModel && !head) || !d.model_dir.empty(), names.at("draft.method"), " ",
                name_of(d.method), " needs ", names.name("draft.path"));
  SPECULA_CHECK(!head || o.sampling.strategy != Strategy::kBeam, names.at("draft.method"), " ", name_of(d.method),
                " excludes ", names.name("sampling.strategy"), " beam");
  SPECULA_CHECK(d.method != DraftMethod::kMedusa || (d.tree_budget == 0 && !d.adaptive && d.siblings == 0),
                names.at("draft.method"), " medusa drafts chains and static trees (", names.name("draft.gamma"), ", ",
                names.name("draft.tree"), "): it excludes ", names.name("draft.budget"), ", ",
                names.name("draft.adaptive"), " and ", names.name("draft.siblings"));
  SPECULA_CHECK(d.tree.empty() || d.tree_budget == 0, names.where("draft.budget"), names.name("draft.tree"),
                " (a static tree) and ", names.name("draft.budget"), " (a dynamic tree) exclude each other");
  SPECULA_CHECK(!d.adaptive || d.drafts_chain(), names.at("draft.adaptive"),
                " adapts a chain's length: it excludes ", names.name("draft.tree"), " and ", names.name("draft.budget"));
  SPECULA_CHECK(d.method != DraftMethod::kNgram || (d.drafts_chain() && !d.adaptive),
                names.at("draft.method"), " ngram proposes chains: ", names.name("draft.tree"), ", ",
                names.name("draft.budget"), " and ", names.name("draft.adaptive"), " need a draft model");
  SPECULA_CHECK(o.sampling.strategy != Strategy::kBeam || !d.adaptive, names.at("draft.adaptive"),
                " cannot be combined with ", names.name("sampling.strategy"),
                " beam (every beam's drafter starts afresh after each step)");
}

}  // namespace specula
