#include "experiments/plan.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "draft/sequoia_tree.h"

namespace specula {
namespace {

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string number(double v) {
  char out[32];
  std::snprintf(out, sizeof out, "%g", v);
  return out;
}

// The logit controls and stop strings set, as a label suffix.
std::string derived_controls(const PointConfig& p) {
  const LogitControls& c = p.controls;
  std::string out;
  if (c.repetition_penalty != 1.0f) out += " rep=" + number(c.repetition_penalty);
  if (c.frequency_penalty != 0.0f) out += " freq=" + number(c.frequency_penalty);
  if (c.presence_penalty != 0.0f) out += " pres=" + number(c.presence_penalty);
  if (c.no_repeat_ngram_size > 0) out += " no-repeat=" + std::to_string(c.no_repeat_ngram_size);
  if (!c.logit_bias.empty()) out += " bias×" + std::to_string(c.logit_bias.size());
  if (!c.banned_tokens.empty()) out += " banned×" + std::to_string(c.banned_tokens.size());
  if (c.min_new_tokens > 0) out += " min-new=" + std::to_string(c.min_new_tokens);
  if (!p.stop_strings.empty()) out += " stop×" + std::to_string(p.stop_strings.size());
  return out;
}

std::string derived_strategy(const PointConfig& p) {
  const SamplingOptions& s = p.sampling;
  if (s.strategy == Strategy::kGreedy) return "greedy" + derived_controls(p);
  if (s.strategy == Strategy::kBeam)
    return "beam w=" + std::to_string(s.beam_width) +
           (s.length_penalty != 1.0f ? " lp=" + number(s.length_penalty) : "") + derived_controls(p);
  std::string out = "T=" + number(s.temperature);
  if (s.top_k > 0) out += " top-k=" + std::to_string(s.top_k);
  if (s.top_p < 1.0f) out += " top-p=" + number(s.top_p);
  if (s.min_p > 0.0f) out += " min-p=" + number(s.min_p);
  return out + derived_controls(p);
}

// Sweep axes the drafter, shape and strategy already show.
bool shown_elsewhere(const std::string& axis) {
  for (const char* key : {"draft", "draft.name", "draft.method", "draft.path", "draft.weights", "draft.gamma", "draft.tree",
                          "draft.budget", "draft.adaptive", "draft.gamma_policy", "draft.stop_below", "draft.max_batch", "verify.rule", "run.batch_size", "sampling"}) {
    if (axis == key) return true;
  }
  return axis.starts_with("sampling.");
}

RunInfo describe(const PointConfig& p, const nlohmann::json& coords) {
  const DraftOptions& d = p.draft;
  RunInfo info;
  info.coords = coords;
  info.strategy = p.sampling_name.empty() ? derived_strategy(p) : p.sampling_name;
  info.drafter = !p.draft_name.empty() ? p.draft_name
                 : d.method == DraftMethod::kModel
                     ? std::filesystem::path(d.model_dir).filename().string() +
                           (d.weights ? " (" + weights_name(d.weights) + ")" : "")
                 : drafts_with_eagle_head(d.method) || d.method == DraftMethod::kMedusa
                     ? std::string(name_of(d.method)) + " " + std::filesystem::path(d.model_dir).filename().string()
                                                    : name_of(d.method);
  info.gamma = d.method == DraftMethod::kNone ? 0 : d.gamma;
  if (d.method == DraftMethod::kNone) {
    info.shape = "none";
  } else if (!d.tree.empty()) {
    info.shape = "tree";
    for (int branching : d.tree) info.tree += (info.tree.empty() ? "" : "-") + std::to_string(branching);
    info.nodes = static_tree_nodes(d.tree);  // saturating: validation refuses big trees
    info.gamma = static_cast<int>(d.tree.size());
    info.variant = "tree " + info.tree;
  } else if (!d.sequoia.empty()) {
    info.shape = "sequoia";
    info.nodes = d.tree_budget;
    info.gamma = sequoia_tree(d.sequoia, d.tree_budget, d.tree_budget).depth();
    info.variant = "sequoia " + std::to_string(d.tree_budget);
  } else if (d.tree_budget > 0) {
    info.shape = "dynamic";
    info.nodes = d.tree_budget;
    info.variant = "dynamic " + std::to_string(d.tree_budget);
  } else {
    info.shape = d.adaptive ? "adaptive" : "chain";
    info.nodes = d.gamma + d.siblings;
    info.variant = (d.adaptive ? "adaptive γ≤" : "γ=") + std::to_string(d.gamma);
    if (d.siblings > 0) info.variant += " +" + std::to_string(d.siblings) + " sibling" + (d.siblings > 1 ? "s" : "");
    if (p.gamma_policy == GammaPolicy::kLoad) info.variant = "load γ≤" + std::to_string(d.gamma);
    if (p.gamma_policy == GammaPolicy::kThreshold) {
      const LengthThreshold& t = p.length_threshold;
      info.variant = "threshold γ≤" + std::to_string(d.gamma) + (t.stop_below > 0 ? " p≥" + number(t.stop_below) : "") +
                     (t.max_batch > 0 ? " b≤" + std::to_string(t.max_batch) : "");
    }
  }
  if (p.verify_rule != VerifyRule::kToken) info.variant += std::string(" ") + name_of(p.verify_rule);
  for (const auto& [axis, value] : coords.items()) {
    if (shown_elsewhere(axis)) continue;
    info.variant += (info.variant.empty() ? "" : " ") + axis + "=" + value.get<std::string>();
  }
  return info;
}

// Labels from drafter, variant and strategy; runs that would share one also show their coords.
void assign_labels(std::vector<PlannedRun>& runs) {
  std::map<std::string, int> uses;
  for (PlannedRun& r : runs) {
    RunInfo& i = r.info;
    i.label = i.shape == "none" ? "target only" : i.drafter;
    for (const std::string* part : {&i.variant, &i.strategy}) {
      // A draft.name that already says "γ=2" is not followed by it again.
      if (!part->empty() && i.drafter.find(*part) == std::string::npos) i.label += " · " + *part;
    }
    if (r.config.batch_size > 0) i.label += " · batch " + std::to_string(r.config.batch_size);
    ++uses[i.label];
  }
  for (PlannedRun& r : runs) {
    if (uses[r.info.label] < 2) continue;
    std::string coords;
    for (const auto& [axis, value] : r.info.coords.items()) {
      coords += (coords.empty() ? "" : ", ") + axis + "=" + value.get<std::string>();
    }
    r.info.label += " [" + coords + "]";
    r.info.variant += (r.info.variant.empty() ? "[" : " [") + coords + "]";
  }
}

}  // namespace

nlohmann::json to_json(const RunInfo& r) {
  return {{"run", r.id},         {"run_index", r.index}, {"role", r.role},   {"baseline", r.baseline},
          {"drafter", r.drafter}, {"shape", r.shape},     {"tree", r.tree},   {"gamma", r.gamma},
          {"nodes", r.nodes},     {"variant", r.variant}, {"strategy", r.strategy}, {"label", r.label},
          {"coords", r.coords}};
}

RunInfo run_info_from(const nlohmann::json& line) {
  RunInfo r;
  r.id = line.at("run").get<std::string>();
  r.index = line.at("run_index").get<int>();
  r.role = line.at("role").get<std::string>();
  r.baseline = line.at("baseline").get<std::string>();
  r.drafter = line.at("drafter").get<std::string>();
  r.shape = line.at("shape").get<std::string>();
  r.tree = line.at("tree").get<std::string>();
  r.gamma = line.at("gamma").get<int>();
  r.nodes = line.at("nodes").get<int>();
  r.variant = line.at("variant").get<std::string>();
  r.strategy = line.at("strategy").get<std::string>();
  r.label = line.at("label").get<std::string>();
  r.coords = line.at("coords");
  return r;
}

Plan make_plan(const ExperimentConfig& config) {
  Plan plan;
  std::map<std::string, int> index_of;  // run id -> index in plan.runs
  auto add = [&](const PointConfig& p, const nlohmann::json& coords, const std::string& role) {
    nlohmann::json settings = canonical_settings(p);
    const std::string id = fnv1a_hex(settings.dump());
    if (const auto it = index_of.find(id); it != index_of.end()) {
      RunInfo& existing = plan.runs[it->second].info;
      if (role == "point" && existing.role == "baseline") {  // a grid point that is also a baseline
        existing = describe(p, coords);
        existing.id = id;
        existing.index = it->second;
        existing.role = role;
      }
      return it->second;
    }
    PlannedRun run{describe(p, coords), p, std::move(settings)};
    run.info.id = id;
    run.info.index = static_cast<int>(plan.runs.size());
    run.info.role = role;
    index_of[id] = run.info.index;
    plan.runs.push_back(std::move(run));
    return static_cast<int>(plan.runs.size()) - 1;
  };

  for (const GridPoint& g : config.grid) {
    nlohmann::json coords = nlohmann::json::object();
    nlohmann::json target_coords = nlohmann::json::object();  // without the draft axes
    for (const auto& [axis, label] : g.coords) {
      coords[axis] = label;
      if (axis != "draft" && !axis.starts_with("draft.")) target_coords[axis] = label;
    }
    if (g.point.draft.method == DraftMethod::kNone) {
      add(g.point, coords, "point");
      continue;
    }
    PointConfig target_alone = g.point;
    clear_draft(target_alone);
    const int baseline = add(target_alone, target_coords, "baseline");
    const int point = add(g.point, coords, "point");
    plan.runs[point].info.baseline = plan.runs[baseline].info.id;
  }
  assign_labels(plan.runs);

  // Every run of a (prompt, seed) once per repetition, in run order on even repetitions and
  // reversed on odd ones: plain and speculative jobs alternate which goes first.
  const int runs = static_cast<int>(plan.runs.size());
  const double jobs = double(runs) * double(config.prompts.size()) * double(config.base.run.seeds.size()) *
                      double(config.base.run.repetitions);
  SPECULA_CHECK(jobs <= double(kMaxJobs), config.file, ": ", runs, " runs (baselines included) x ",
                config.prompts.size(), " prompts x ", config.base.run.seeds.size(), " run.seeds x ",
                config.base.run.repetitions, " run.repetitions = ", jobs, " jobs, more than ", kMaxJobs);
  plan.jobs.reserve(static_cast<std::size_t>(jobs));
  std::vector<std::string> prompt_keys;
  for (std::size_t p = 0; p < config.prompts.size(); ++p) {
    // The prompt's text (or chat messages, or token ids) is in its key: an edited prompt is a new job, not the old outputs.
    nlohmann::json content = {config.prompts[p].text};
    for (const ChatMessage& m : config.prompts[p].messages) content.push_back({m.role, m.content});
    if (!config.prompts[p].ids.empty()) content.push_back(config.prompts[p].ids);
    const std::string prompt_key = config.prompts[p].id + "#" + fnv1a_hex(content.dump()).substr(0, 8);
    prompt_keys.push_back(prompt_key);
    for (uint64_t seed : config.base.run.seeds) {
      for (int rep = 0; rep < config.base.run.repetitions; ++rep) {
        for (int i = 0; i < runs; ++i) {
          const PlannedRun& r = plan.runs[rep % 2 == 0 ? i : runs - 1 - i];
          if (r.config.batch_size > 0) continue;
          const std::string key = r.info.id + "/" + prompt_key + "/seed=" + std::to_string(seed) +
                                  "/rep=" + std::to_string(rep);
          plan.jobs.push_back({r.info.index, static_cast<int>(p), seed, rep, key});
        }
      }
    }
  }
  // Batched runs: one job per (run, seed, repetition) holding every prompt, its key naming the
  // prompt set by the hash of the prompts' keys; the same alternation of run order.
  const std::string batch_key = "batch#" + fnv1a_hex(nlohmann::json(prompt_keys).dump()).substr(0, 8);
  for (uint64_t seed : config.base.run.seeds) {
    for (int rep = 0; rep < config.base.run.repetitions; ++rep) {
      for (int i = 0; i < runs; ++i) {
        const PlannedRun& r = plan.runs[rep % 2 == 0 ? i : runs - 1 - i];
        if (r.config.batch_size == 0) continue;
        const std::string key = r.info.id + "/" + batch_key + "/seed=" + std::to_string(seed) + "/rep=" + std::to_string(rep);
        plan.jobs.push_back({r.info.index, kAllPrompts, seed, rep, key});
      }
    }
  }
  return plan;
}

GenerateOptions generate_options(const PlannedRun& run, const std::vector<int>& prompt_ids, uint64_t seed) {
  GenerateOptions o = request_options(run.config);
  o.prompt_ids = prompt_ids;
  o.seed = seed;
  return o;
}

}  // namespace specula
