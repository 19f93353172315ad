#include "experiments/config.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "experiments/config_fields.h"
#include "experiments/prompts.h"
#include "experiments/sweep.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSections = {"target", "draft", "verify", "sampling", "run", "output"};

bool contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

const std::vector<std::string>& top_level_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"title"};
    n.insert(n.end(), kSections.begin(), kSections.end());
    n.push_back("sweep");
    return n;
  }();
  return names;
}

// A key the main document sets: top-level ones are matched against the sections as well.
const ConfigField& document_field(const std::string& key, const toml::source_region& where) {
  const auto dot = key.find('.');
  if (dot != std::string::npos) return known_field(key, where, config_keys(), config_keys(key.substr(0, dot)));
  std::vector<std::string> candidates = config_keys();
  candidates.insert(candidates.end(), top_level_names().begin(), top_level_names().end());
  return known_field(key, where, candidates, top_level_names());
}

std::string resolved_toml(const ExperimentConfig& c) {
  toml::table root;
  for (const ConfigField& f : config_fields()) f.write(c.base, root);
  std::string text = "# " + c.file + " with every default filled in and paths made absolute\n" + toml_text(root) + "\n";
  if (!c.sweep.written.empty()) text += "\n[sweep]\n" + c.sweep.written;
  return text;
}

}  // namespace

GenerateOptions request_options(const PointConfig& p) {
  GenerateOptions o;
  o.model_dir = p.target;
  o.weights = p.target_weights;
  o.max_new_tokens = p.max_new_tokens;
  o.kv_block_size = p.kv_block_size;
  o.kv_pool_blocks = p.kv_pool_blocks;
  o.kv_dtype = p.kv_dtype;
  o.threads = p.threads;
  o.backend = p.backend;
  o.sampling = p.sampling;
  o.controls = p.controls;
  o.stop_strings = p.stop_strings;
  o.draft = p.draft;
  o.gamma_policy = p.gamma_policy;
  o.length_threshold = p.length_threshold;
  o.verify_rule = p.verify_rule;
  o.logprobs = p.logprobs;
  o.logprobs_source = p.logprobs_source;
  return o;
}

PointConfig point_config(const GenerateOptions& o) {
  PointConfig p;
  p.target = o.model_dir;
  p.target_weights = o.weights;
  p.draft = o.draft;
  p.sampling = o.sampling;
  p.controls = o.controls;
  p.stop_strings = o.stop_strings;
  p.max_new_tokens = o.max_new_tokens;
  p.kv_block_size = o.kv_block_size;
  p.kv_pool_blocks = o.kv_pool_blocks;
  p.kv_dtype = o.kv_dtype;
  p.threads = o.threads;
  p.backend = o.backend;
  p.gamma_policy = o.gamma_policy;
  p.length_threshold = o.length_threshold;
  p.verify_rule = o.verify_rule;
  p.logprobs = o.logprobs;
  p.logprobs_source = o.logprobs_source;
  return p;
}

void clear_draft(PointConfig& p) {
  p.draft = DraftOptions{};
  p.draft_name.clear();
  p.gamma_policy = GammaPolicy::kFixed;
  p.length_threshold = LengthThreshold{};
  p.verify_rule = VerifyRule::kToken;
}

nlohmann::json canonical_settings(const PointConfig& p) {
  const DraftOptions& d = p.draft;
  const SamplingOptions& s = p.sampling;
  nlohmann::json settings = {{"target", p.target},
          {"draft",
           {{"method", name_of(d.method)}, {"path", d.model_dir}, {"weights", weights_name(d.weights)}, {"gamma", d.gamma},
            {"tree", d.tree},
            {"budget", d.tree_budget}, {"adaptive", d.adaptive}, {"ngram_min", d.ngram_min}, {"ngram_max", d.ngram_max}}},
          {"sampling",
           {{"strategy", name_of(s.strategy)}, {"temperature", as_written(s.temperature)}, {"top_k", s.top_k},
            {"top_p", as_written(s.top_p)}, {"min_p", as_written(s.min_p)}, {"beam_width", s.beam_width},
            {"length_penalty", as_written(s.length_penalty)}}},
          {"max_new_tokens", p.max_new_tokens},
          {"kv_block_size", p.kv_block_size},
          {"threads", p.threads},
          {"backend", name_of(p.backend)}};
  // Keys with their defaults are left out, so the runs of configs written before them keep their ids.
  if (p.gamma_policy != GammaPolicy::kFixed) settings["draft"]["gamma_policy"] = name_of(p.gamma_policy);
  if (p.gamma_policy == GammaPolicy::kThreshold) {
    settings["draft"]["stop_below"] = p.length_threshold.stop_below;
    settings["draft"]["max_batch"] = p.length_threshold.max_batch;
  }
  if (d.siblings != 0) settings["draft"]["siblings"] = d.siblings;
  if (!d.sequoia.empty()) settings["draft"]["sequoia"] = d.sequoia;
  if (p.verify_rule != VerifyRule::kToken) settings["verify"] = {{"rule", name_of(p.verify_rule)}};
  const LogitControls& c = p.controls;
  if (c.repetition_penalty != 1.0f) settings["sampling"]["repetition_penalty"] = as_written(c.repetition_penalty);
  if (c.frequency_penalty != 0.0f) settings["sampling"]["frequency_penalty"] = as_written(c.frequency_penalty);
  if (c.presence_penalty != 0.0f) settings["sampling"]["presence_penalty"] = as_written(c.presence_penalty);
  if (c.no_repeat_ngram_size != 0) settings["sampling"]["no_repeat_ngram_size"] = c.no_repeat_ngram_size;
  for (const auto& [token, bias] : c.logit_bias)
    settings["sampling"]["logit_bias"].push_back(nlohmann::json::array({token, as_written(bias)}));
  if (!c.banned_tokens.empty()) settings["sampling"]["banned_tokens"] = c.banned_tokens;
  if (c.min_new_tokens != 0) settings["sampling"]["min_new_tokens"] = c.min_new_tokens;
  if (!p.stop_strings.empty()) settings["sampling"]["stop_strings"] = p.stop_strings;
  if (p.batch_size > 0) {
    settings["batch_size"] = p.batch_size;
    settings["request_rate"] = p.request_rate;
  }
  // Only when set, so that the keys of results written before these existed still match.
  if (p.kv_pool_blocks > 0) settings["kv_pool_blocks"] = p.kv_pool_blocks;
  if (p.kv_dtype) settings["kv_dtype"] = name_of(*p.kv_dtype);
  // Only when set, so the ids of runs on stored weights stay what they were.
  if (p.target_weights) settings["target_weights"] = weights_name(p.target_weights);
  if (p.logprobs) settings["output"] = {{"logprobs", *p.logprobs}, {"logprobs_source", name_of(p.logprobs_source)}};
  return settings;
}

ExperimentConfig load_config(const std::string& path) {
  std::error_code refused;  // e.g. a name too long for the file system: not a file either
  SPECULA_CHECK(fs::is_regular_file(path, refused), "config file '", path, "' does not exist");
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    config_error(e.source(), "TOML syntax error: " + std::string(e.description()));
  }
  const fs::path dir = fs::absolute(path).parent_path();
  ExperimentConfig c;
  c.file = path;
  c.base.output.directory = (dir / "results" / fs::path(path).stem()).string();

  auto assign = [&](const std::string& key, const toml::source_region& key_where, const toml::node& value) {
    document_field(key, key_where).parse(value, dir)(c.base);
    c.origins[key] = source_location(value.source());
  };
  const toml::table* sweep = nullptr;
  for (auto&& [k, v] : root) {
    const std::string name(k.str());
    if (name == "sweep" || contains(kSections, name)) {
      if (!v.is_table()) config_error(v.source(), name + " must be a table ([" + name + "])");
      if (name == "sweep") {
        sweep = v.as_table();
        continue;
      }
      for (auto&& [fk, fv] : *v.as_table()) assign(name + "." + std::string(fk.str()), fk.source(), fv);
    } else {
      assign(name, k.source(), v);
    }
  }
  SPECULA_CHECK(c.origins.count("target.path"), path, ": missing required key target.path (the target model folder)");
  const bool file_prompts = c.origins.count("run.prompts_file") > 0;
  SPECULA_CHECK(file_prompts || c.origins.count("run.prompts"), path, ": missing run.prompts_file or run.prompts");
  SPECULA_CHECK(!file_prompts || !c.origins.count("run.prompts"), c.origins["run.prompts"],
                ": run.prompts and run.prompts_file exclude each other");

  const std::vector<std::string>& formats = c.base.output.formats;
  SPECULA_CHECK(!contains(formats, "png") || contains(formats, "csv"), c.origins["output.formats"],
                ": output.formats: the png plots are drawn from summary.csv; add \"csv\"");

  if (sweep) c.sweep = parse_sweep(*sweep, dir);
  c.grid = expand_grid(c.base, c.origins, c.sweep, path);
  c.prompts = select_prompts(c.base.run, c.origins, path);
  c.resolved_toml = resolved_toml(c);
  return c;
}

}  // namespace specula
