#include "runtime/generate_options.h"

#include <map>

#include "base/error.h"
#include "engine/cuda/device.h"
#include "sampling/sampler.h"

namespace specula {

OptionNames cli_option_names() {
  static const std::map<std::string, std::string, std::less<>> flags = {
      {"target.path", "--model"},
      {"prompt", "--prompt"},
      {"run.max_new_tokens", "--max-new-tokens"},
      {"run.num_samples", "--num-samples"},
      {"run.seeds", "--seed"},
      {"run.kv_block_size", "--kv-block-size"},
      {"run.threads", "--threads"},
      {"run.backend", "--backend"},
      {"sampling.strategy", "--sampler"},
      {"sampling.temperature", "--temperature"},
      {"sampling.top_k", "--top-k"},
      {"sampling.top_p", "--top-p"},
      {"sampling.min_p", "--min-p"},
      {"sampling.beam_width", "--beam-width"},
      {"sampling.length_penalty", "--length-penalty"},
      {"draft.method", "--draft-method"},
      {"draft.path", "--draft"},
      {"draft.weights", "--draft-weights"},
      {"draft.gamma", "--gamma"},
      {"draft.tree", "--tree"},
      {"draft.budget", "--tree-budget"},
      {"draft.adaptive", "--adaptive"},
      {"draft.gamma_policy", "--gamma-policy"},
      {"draft.ngram_min", "--ngram-min"},
      {"draft.ngram_max", "--ngram-max"},
  };
  OptionNames names;
  names.name = [](std::string_view key) {
    const auto it = flags.find(key);
    return it == flags.end() ? std::string(key) : it->second;
  };
  return names;
}

void validate_options(const GenerateOptions& o, const OptionNames& names) {
  SPECULA_CHECK(o.max_new_tokens >= 1, names.at("run.max_new_tokens"), " must be >= 1, got ", o.max_new_tokens);
  SPECULA_CHECK(o.num_samples >= 1, names.at("run.num_samples"), " must be >= 1, got ", o.num_samples);
  SPECULA_CHECK(o.kv_block_size >= 1, names.at("run.kv_block_size"), " must be >= 1, got ", o.kv_block_size);
  SPECULA_CHECK(o.threads >= 0, names.at("run.threads"), " must be >= 0, got ", o.threads);
  SPECULA_CHECK(o.backend == BackendKind::kCpu || cuda_device_count() > 0, names.at("run.backend"), " ",
                name_of(o.backend), ": no usable GPU (", cuda_unavailable_reason(), "); use cpu");
  validate_sampling_options(o.sampling, names);

  const DraftOptions& d = o.draft;
  SPECULA_CHECK(d.gamma >= 1, names.at("draft.gamma"), " must be >= 1, got ", d.gamma);
  SPECULA_CHECK(d.tree_budget >= 0, names.at("draft.budget"), " must be >= 0, got ", d.tree_budget);
  for (int b : d.tree) SPECULA_CHECK(b >= 1, names.at("draft.tree"), ": every branching factor must be >= 1, got ", b);
  SPECULA_CHECK(d.ngram_min >= 1 && d.ngram_min <= d.ngram_max, names.at("draft.ngram_max"), " (", d.ngram_max,
                ") must be >= ", names.name("draft.ngram_min"), " (", d.ngram_min, ") and that >= 1");
  SPECULA_CHECK(o.gamma_policy == GammaPolicy::kFixed || (d.method != DraftMethod::kNone && d.tree.empty() &&
                                                           d.tree_budget == 0 && !d.adaptive),
                names.at("draft.gamma_policy"), " load chooses a chain's length each step: it needs a chain drafter (",
                names.name("draft.method"), " model or ngram) and excludes ", names.name("draft.tree"), ", ",
                names.name("draft.budget"), " and ", names.name("draft.adaptive"));
  SPECULA_CHECK(o.gamma_policy == GammaPolicy::kFixed || o.sampling.strategy != Strategy::kBeam,
                names.at("draft.gamma_policy"), " load cannot be combined with ", names.name("sampling.strategy"),
                " beam (beam steps are one unit)");
  if (d.method == DraftMethod::kNone) return;
  SPECULA_CHECK(d.method != DraftMethod::kModel || !d.model_dir.empty(), names.at("draft.method"),
                " model needs ", names.name("draft.path"));
  SPECULA_CHECK(d.tree.empty() || d.tree_budget == 0, names.where("draft.budget"), names.name("draft.tree"),
                " (a static tree) and ", names.name("draft.budget"), " (a dynamic tree) exclude each other");
  SPECULA_CHECK(!d.adaptive || (d.tree.empty() && d.tree_budget == 0), names.at("draft.adaptive"),
                " adapts a chain's length: it excludes ", names.name("draft.tree"), " and ", names.name("draft.budget"));
  SPECULA_CHECK(d.method != DraftMethod::kNgram || (d.tree.empty() && d.tree_budget == 0 && !d.adaptive),
                names.at("draft.method"), " ngram proposes chains: ", names.name("draft.tree"), ", ",
                names.name("draft.budget"), " and ", names.name("draft.adaptive"), " need a draft model");
  SPECULA_CHECK(o.sampling.strategy != Strategy::kBeam || !d.adaptive, names.at("draft.adaptive"),
                " cannot be combined with ", names.name("sampling.strategy"),
                " beam (every beam's drafter starts afresh after each step)");
}

}  // namespace specula
