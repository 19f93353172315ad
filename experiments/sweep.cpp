#include "experiments/sweep.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "experiments/config_fields.h"
#include "experiments/suggest.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxGridPoints = 10000;

bool is_path_key(const std::string& key) {
  const ConfigField* f = find_config_field(key);
  return f && f->is_path;
}

// Makes the path values in `value` (set for `key`; tables hold key.* entries) absolute.
void absolutize(toml::node& value, const std::string& key, const fs::path& dir) {
  if (auto* path = value.as_string(); path && is_path_key(key)) *path = resolve_path(dir, path->get());
  if (toml::table* fields = value.as_table()) {
    for (auto&& [k, v] : *fields) absolutize(v, (key.empty() ? "" : key + ".") + std::string(k.str()), dir);
  }
  if (toml::array* values = value.as_array()) {
    for (toml::node& v : *values) absolutize(v, key, dir);
  }
}

// `values` as TOML with their paths absolute, for the resolved config.
std::string written(const toml::array& values, const std::string& key, const fs::path& dir) {
  toml::array copy = values;
  absolutize(copy, key, dir);
  return toml_text(copy);
}

// Adds to `v` the assignments of `fields` (nested tables are dotted prefixes) under `prefix`.
void add_fields(SweepValue& v, const toml::table& fields, const std::string& prefix, const std::vector<std::string>& valid,
                const fs::path& dir) {
  for (auto&& [k, x] : fields) {
    const std::string key = prefix + std::string(k.str());
    if (x.is_table() && !find_config_field(key)) {
      add_fields(v, *x.as_table(), key + ".", valid, dir);
      continue;
    }
    const ConfigField& field = known_field(key, k.source(), valid, valid);
    if (!field.sweepable) config_error(k.source(), "'" + key + "' cannot be swept: every point shares it");
    v.assignments.push_back(field.parse(x, dir));
    v.keys.push_back(key);
    if (k.str() == "name") v.label = x.as_string()->get();
  }
}

// A sweep axis from `values` of `key`: a field's values, or tables of a section's fields.
SweepAxis make_axis(const std::string& key, const toml::source_region& key_where, const toml::array& values,
                    const fs::path& dir) {
  SweepAxis axis{key, {}, written(values, key, dir)};
  if (values.empty()) config_error(key_where, "sweep '" + key + "' has no values");
  const bool section = find_config_field(key) == nullptr && !config_keys(key).empty();
  const ConfigField* field = section ? nullptr : &known_field(key, key_where, sweepable_keys(), sweepable_keys());
  if (field && !field->sweepable) {
    config_error(key_where, "'" + key + "' cannot be swept: every point shares it" + did_you_mean(key, {}, sweepable_keys()));
  }
  for (const toml::node& value : values) {
    SweepValue v{render_value(value), source_location(value.source()), {}, {}};
    if (field) {
      v.assignments.push_back(field->parse(value, dir));
      v.keys.push_back(key);
    } else if (value.is_table()) {
      add_fields(v, *value.as_table(), key + ".", config_keys(key), dir);
    } else {
      config_error(value.source(), "sweep '" + key + "' values must be tables of " + key + ".* keys");
    }
    axis.values.push_back(std::move(v));
  }
  return axis;
}

// sweep.exclude: tables of dotted keys, e.g. { "sampling.strategy" = "beam", "draft.method" = "model" }.
std::vector<SweepValue> make_exclusions(const toml::node& node, const fs::path& dir) {
  const std::string shape = "tables of sweepable keys, e.g. { \"sampling.strategy\" = \"beam\", \"draft.method\" = \"model\" }";
  if (!node.is_array()) config_error(node.source(), "sweep.exclude must be a list of " + shape);
  std::vector<SweepValue> exclusions;
  for (const toml::node& e : *node.as_array()) {
    if (!e.is_table() || e.as_table()->empty()) config_error(e.source(), "sweep.exclude entries must be " + shape);
    SweepValue v{render_value(e), source_location(e.source()), {}, {}};
    add_fields(v, *e.as_table(), "", sweepable_keys(), dir);
    exclusions.push_back(std::move(v));
  }
  return exclusions;
}

// The axes under `table` (nested tables are dotted prefixes), with the position of each key.
void collect_axes(const toml::table& table, const std::string& prefix, const fs::path& dir,
                  std::vector<std::pair<toml::source_position, SweepAxis>>& out) {
  for (auto&& [k, v] : table) {
    const std::string key = prefix + std::string(k.str());
    if (key == "exclude") continue;
    if (v.is_table()) {
      collect_axes(*v.as_table(), key + ".", dir, out);
    } else if (v.is_array()) {
      out.emplace_back(k.source().begin, make_axis(key, k.source(), *v.as_array(), dir));
    } else {
      config_error(v.source(), "sweep '" + key + "' must be a list of values, got " + render_value(v));
    }
  }
}

void apply(const SweepValue& v, Settings& s) {
  for (const Assignment& a : v.assignments) a(s);
}

// Whether `s` already has every setting `exclusion` names.
bool matches(const SweepValue& exclusion, const Settings& s) {
  Settings changed = s;
  apply(exclusion, changed);
  const PointConfig &a = s.point, &b = changed.point;
  return canonical_settings(a) == canonical_settings(b) && a.draft_name == b.draft_name &&
         a.sampling_name == b.sampling_name;
}

std::string origin_of(const Origins& origins, const std::string& key, const std::string& file) {
  const auto it = origins.find(key);
  return it == origins.end() ? file : it->second;
}

// The shared request validation (runtime/generate_options.h) of one point, its errors naming
// the key and the file:line that set it; `context` names the sweep point.
void check_point(const PointConfig& p, const Origins& origins, const std::string& file, const std::string& context) {
  OptionNames names;
  names.where = [&](std::string_view key) { return origin_of(origins, std::string(key), file) + ": "; };
  try {
    validate_options(request_options(p), names);
    SPECULA_CHECK(p.logprobs || !origins.count("output.logprobs_source"), names.at("output.logprobs_source"),
                  " does not apply: it needs output.logprobs");
    SPECULA_CHECK(p.request_rate == 0 || p.batch_size >= 1, names.at("run.request_rate"), " = ", p.request_rate,
                  ": arrivals need a batched run; set run.batch_size >= 1 (0 runs one request per job)");
  } catch (const SpeculaError& e) {
    throw SpeculaError(e.what() + context);
  }
}

}  // namespace

Sweep parse_sweep(const toml::table& table, const fs::path& dir) {
  std::vector<std::pair<toml::source_position, SweepAxis>> found;
  collect_axes(table, "", dir, found);
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::pair(a.first.line, a.first.column) < std::pair(b.first.line, b.first.column);
  });
  Sweep sweep;
  std::map<std::string, std::string> set_by;  // dotted key -> axis that sets it
  for (auto& [position, axis] : found) {
    for (const SweepValue& v : axis.values) {
      for (const std::string& k : v.keys) {
        const auto [it, inserted] = set_by.emplace(k, axis.key);
        SPECULA_CHECK(inserted || it->second == axis.key, v.origin, ": sweep '", axis.key, "' sets ", k,
                      ", which sweep '", it->second, "' sets too");
      }
    }
    sweep.written += "'" + axis.key + "' = " + axis.written + "\n";
    sweep.axes.push_back(std::move(axis));
  }
  if (const toml::node* exclude = table.get("exclude")) {
    sweep.exclusions = make_exclusions(*exclude, dir);
    sweep.written += "exclude = " + written(*exclude->as_array(), "", dir) + "\n";
  }
  return sweep;
}

std::vector<GridPoint> expand_grid(const Settings& base, const Origins& origins, const Sweep& sweep,
                                   const std::string& file) {
  std::size_t total = 1;
  for (const SweepAxis& a : sweep.axes) {
    total *= a.values.size();
    SPECULA_CHECK(total <= kMaxGridPoints, file, ": the sweep grid has more than ", kMaxGridPoints, " points");
  }
  std::vector<int> excluded(sweep.exclusions.size(), 0);
  std::vector<GridPoint> grid;
  struct PointCheck {
    PointConfig point;
    Origins origins;
    std::string context;
  };
  std::vector<PointCheck> checks;
  for (std::size_t n = 0; n < total; ++n) {
    Settings s = base;
    Origins point_origins = origins;
    GridPoint g;
    std::size_t stride = total;
    std::string context;
    for (const SweepAxis& a : sweep.axes) {
      stride /= a.values.size();
      const SweepValue& v = a.values[(n / stride) % a.values.size()];
      apply(v, s);
      for (const std::string& k : v.keys) point_origins[k] = v.origin;
      g.coords.emplace_back(a.key, v.label);
      context += (context.empty() ? " (sweep point " : ", ") + a.key + "=" + v.label;
    }
    const auto exclusion = std::find_if(sweep.exclusions.begin(), sweep.exclusions.end(),
                                        [&](const SweepValue& e) { return matches(e, s); });
    if (exclusion != sweep.exclusions.end()) {
      ++excluded[exclusion - sweep.exclusions.begin()];
      continue;
    }
    checks.push_back({s.point, std::move(point_origins), context.empty() ? "" : context + ")"});
    if (s.point.draft.method == DraftMethod::kNone) clear_draft(s.point);  // equal runs compare equal
    g.point = s.point;
    grid.push_back(std::move(g));
  }
  for (std::size_t i = 0; i < excluded.size(); ++i) {
    SPECULA_CHECK(excluded[i] > 0, sweep.exclusions[i].origin, ": sweep.exclude entry ", sweep.exclusions[i].label,
                  " matches no point of the grid");
  }
  SPECULA_CHECK(!grid.empty(), file, ": sweep.exclude removes every point of the grid");
  // The points that remain must be requests that can run (after the exclusions are known to
  // be meaningful, so that a stale exclusion is reported as such).
  for (const PointCheck& c : checks) check_point(c.point, c.origins, file, c.context);
  return grid;
}

}  // namespace specula
