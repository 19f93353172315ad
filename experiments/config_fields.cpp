#include "experiments/config_fields.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <type_traits>

#include "base/error.h"
#include "experiments/suggest.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

std::string_view last_component(std::string_view key) {
  const auto dot = key.rfind('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

[[noreturn]] void wrong_type(const toml::node& n, const std::string& key, const std::string& expected) {
  config_error(n.source(), key + " must be " + expected + ", got " + type_name(n) + " (" + render_value(n) + ")");
}

// The table that holds `key`'s value inside `root`, created on demand.
toml::table& parent_table(toml::table& root, std::string_view key) {
  const auto dot = key.find('.');
  if (dot == std::string_view::npos) return root;
  auto [it, inserted] = root.emplace<toml::table>(key.substr(0, dot));
  return *it->second.as_table();
}

template <typename Value, typename Ref>
std::function<void(const Settings&, toml::table&)> writer(std::string key, Ref ref) {
  return [key, ref](const Settings& s, toml::table& root) {
    parent_table(root, key).insert_or_assign(last_component(key), Value(ref(s)));
  };
}

int64_t integer_at_least(const toml::node& n, const std::string& key, int64_t min, int64_t max = INT_MAX) {
  if (!n.is_integer()) wrong_type(n, key, "an integer");
  const int64_t v = n.as_integer()->get();
  if (v < min || v > max) {
    config_error(n.source(), key + " must be an integer " +
                                 (max == INT_MAX ? ">= " + std::to_string(min)
                                                 : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]") +
                                 ", got " + std::to_string(v));
  }
  return v;
}

const std::string& string_of(const toml::node& n, const std::string& key) {
  if (!n.is_string()) wrong_type(n, key, "a string");
  return n.as_string()->get();
}

const toml::array& array_of(const toml::node& n, const std::string& key) {
  if (!n.is_array()) wrong_type(n, key, "an array");
  return *n.as_array();
}

template <typename Ref>
ConfigField int_field(std::string key, Ref ref, int64_t min, bool sweepable = true, int64_t max = INT_MAX) {
  auto parse = [key, ref, min, max](const toml::node& n, const fs::path&) -> Assignment {
    const int v = static_cast<int>(integer_at_least(n, key, min, max));
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  return {key, sweepable, parse, writer<int64_t>(key, ref)};
}

template <typename Ref, typename Valid>
ConfigField float_field(std::string key, Ref ref, Valid valid, std::string range) {
  auto parse = [key, ref, valid, range](const toml::node& n, const fs::path&) -> Assignment {
    if (!n.is_number()) wrong_type(n, key, "a number");
    const double v = n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
    // Checked as the float it becomes: 1e-300 passes (0, 1] as a double and is 0 as a float.
    if (!(std::fabs(v) <= FLT_MAX) || !valid(static_cast<double>(static_cast<float>(v))))
      config_error(n.source(), key + " must be " + range + ", got " + render_value(n));
    return [ref, v](Settings& s) { ref(s) = static_cast<float>(v); };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    parent_table(root, key).insert_or_assign(last_component(key), as_written(ref(s)));
  };
  return {key, true, parse, write};
}

// A number in [min, max] kept as a double (written back as given).
template <typename Ref>
ConfigField double_field(std::string key, Ref ref, double min, double max) {
  auto parse = [key, ref, min, max](const toml::node& n, const fs::path&) -> Assignment {
    if (!n.is_number()) wrong_type(n, key, "a number");
    const double v = n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
    if (!(v >= min && v <= max)) {
      char range[64];
      std::snprintf(range, sizeof range, "in [%g, %g]", min, max);
      config_error(n.source(), key + " must be a number " + range + ", got " + render_value(n));
    }
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  return {key, true, parse, writer<double>(key, ref)};
}

// An integer in [min, max] that is unset (nullopt, not written) unless the config sets it.
template <typename Ref>
ConfigField optional_int_field(std::string key, Ref ref, int64_t min, int64_t max, bool sweepable) {
  auto parse = [key, ref, min, max](const toml::node& n, const fs::path&) -> Assignment {
    const int v = static_cast<int>(integer_at_least(n, key, min, max));
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    if (ref(s)) parent_table(root, key).insert_or_assign(last_component(key), int64_t{*ref(s)});
  };
  return {key, sweepable, parse, write};
}

template <typename Ref>
ConfigField bool_field(std::string key, Ref ref) {
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    if (!n.is_boolean()) wrong_type(n, key, "a boolean");
    const bool v = n.as_boolean()->get();
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  return {key, true, parse, writer<bool>(key, ref)};
}

template <typename Ref>
ConfigField string_field(std::string key, Ref ref, bool sweepable = true) {
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    const std::string v = string_of(n, key);
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  return {key, sweepable, parse, writer<std::string>(key, ref)};
}

// A string key parsed into an option enum (base/enum_names.h), spelled back by name_of.
template <typename Ref>
ConfigField enum_field(std::string key, Ref ref, bool sweepable = true) {
  using Enum = std::decay_t<decltype(ref(std::declval<Settings&>()))>;
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    const std::string v = string_of(n, key);
    const std::optional<Enum> value = parse_enum<Enum>(v);
    if (!value) {
      const std::vector<std::string> allowed = enum_spellings<Enum>();
      config_error(n.source(), key + ": unknown value '" + v + "'" + did_you_mean(v, allowed, allowed));
    }
    return [ref, e = *value](Settings& s) { ref(s) = e; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    parent_table(root, key).insert_or_assign(last_component(key), std::string(name_of(ref(s))));
  };
  return {key, sweepable, parse, write};
}

// target.weights, draft.weights: "stored" or a MatrixFormat name (draft/draft_options.h).
template <typename Ref>
ConfigField weights_field(std::string key, Ref ref) {
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    const std::string v = string_of(n, key);
    std::optional<MatrixFormat> weights;
    if (!parse_weights(v, weights) || (weights && v != weights_name(weights))) {
      const std::vector<std::string> allowed = weights_spellings();
      config_error(n.source(), key + ": unknown value '" + v + "'" + did_you_mean(v, allowed, allowed));
    }
    return [ref, weights](Settings& s) { ref(s) = weights; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    parent_table(root, key).insert_or_assign(last_component(key), weights_name(ref(s)));
  };
  return {key, true, parse, write};
}

// run.kv_dtype: a KvDType name (kv/page_storage.h); unset means the backend's own.
template <typename Ref>
ConfigField kv_dtype_field(std::string key, Ref ref) {
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    const std::string v = string_of(n, key);
    const std::optional<KvDType> value = parse_enum<KvDType>(v);
    if (!value) {
      const std::vector<std::string> allowed = enum_spellings<KvDType>();
      config_error(n.source(), key + ": unknown value '" + v + "'" + did_you_mean(v, allowed, allowed));
    }
    return [ref, value](Settings& s) { ref(s) = value; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    if (ref(s)) parent_table(root, key).insert_or_assign(last_component(key), std::string(name_of(*ref(s))));
  };
  return {key, true, parse, write};
}

enum class PathKind { model_dir, file, output_dir };

template <typename Ref>
ConfigField path_field(std::string key, Ref ref, PathKind kind, bool sweepable) {
  auto parse = [key, ref, kind](const toml::node& n, const fs::path& dir) -> Assignment {
    const std::string& given = string_of(n, key);
    if (given.empty()) config_error(n.source(), key + " must not be empty");
    const std::string path = resolve_path(dir, given);
    std::error_code refused;  // a name the file system refuses is not a file either
    if (kind == PathKind::model_dir && !fs::is_regular_file(fs::path(path) / "config.json", refused)) {
      config_error(n.source(), key + ": '" + given + "' (" + path + ") is not a model folder (no config.json there)");
    }
    if (kind == PathKind::file && !fs::is_regular_file(path, refused)) {
      config_error(n.source(), key + ": file '" + given + "' (" + path + ") does not exist");
    }
    return [ref, path](Settings& s) { ref(s) = path; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    if (!ref(s).empty()) parent_table(root, key).insert_or_assign(last_component(key), ref(s));
  };
  return {key, sweepable, parse, write, true};
}

// An array of integers >= min; `Int` is the element type of the settings vector.
template <typename Int, typename Ref>
ConfigField int_list_field(std::string key, Ref ref, int64_t min, bool allow_empty, bool sweepable) {
  auto parse = [key, ref, min, allow_empty](const toml::node& n, const fs::path&) -> Assignment {
    const toml::array& a = array_of(n, key);
    if (a.empty() && !allow_empty) config_error(n.source(), key + " must not be empty");
    std::vector<Int> v;
    for (const toml::node& e : a) v.push_back(static_cast<Int>(integer_at_least(e, key + " element", min)));
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    toml::array a;
    for (Int x : ref(s)) a.push_back(static_cast<int64_t>(x));
    parent_table(root, key).insert_or_assign(last_component(key), std::move(a));
  };
  return {key, sweepable, parse, write};
}

// An array of [token, value] pairs: token an integer >= 0, value a finite number.
template <typename Ref>
ConfigField logit_bias_field(std::string key, Ref ref) {
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    std::vector<std::pair<int, float>> v;
    for (const toml::node& e : array_of(n, key)) {
      const toml::array& pair = array_of(e, key + " element");
      if (pair.size() != 2 || !pair[1].is_number())
        config_error(e.source(), key + " elements must be [token, value], got " + render_value(e));
      const int token = static_cast<int>(integer_at_least(pair[0], key + " token", 0));
      const double value = pair[1].is_integer() ? static_cast<double>(pair[1].as_integer()->get())
                                                : pair[1].as_floating_point()->get();
      if (!(std::fabs(value) <= FLT_MAX)) config_error(e.source(), key + " values must be finite, got " + render_value(e));
      v.emplace_back(token, static_cast<float>(value));
    }
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    toml::array a;
    for (const auto& [token, value] : ref(s)) a.push_back(toml::array{static_cast<int64_t>(token), as_written(value)});
    parent_table(root, key).insert_or_assign(last_component(key), std::move(a));
  };
  return {key, true, parse, write};
}

// An array of rows of numbers (draft.sequoia: one row per depth, by sibling rank); the
// values are checked by validate_options.
template <typename Ref>
ConfigField number_rows_field(std::string key, Ref ref) {
  auto parse = [key, ref](const toml::node& n, const fs::path&) -> Assignment {
    std::vector<std::vector<double>> rows;
    for (const toml::node& e : array_of(n, key)) {
      std::vector<double>& row = rows.emplace_back();
      for (const toml::node& x : array_of(e, key + " row")) {
        if (!x.is_number()) config_error(x.source(), key + " rows must hold numbers, got " + render_value(x));
        row.push_back(x.is_integer() ? static_cast<double>(x.as_integer()->get()) : x.as_floating_point()->get());
      }
    }
    return [ref, rows](Settings& s) { ref(s) = rows; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    if (ref(s).empty()) return;
    toml::array a;
    for (const std::vector<double>& row : ref(s)) {
      toml::array r;
      for (double x : row) r.push_back(x);
      a.push_back(std::move(r));
    }
    parent_table(root, key).insert_or_assign(last_component(key), std::move(a));
  };
  return {key, true, parse, write};
}

// An array of strings, each one of `allowed` unless `allowed` is empty.
template <typename Ref>
ConfigField string_list_field(std::string key, Ref ref, std::vector<std::string> allowed, bool sweepable = false) {
  auto parse = [key, ref, allowed](const toml::node& n, const fs::path&) -> Assignment {
    std::vector<std::string> v;
    for (const toml::node& e : array_of(n, key)) {
      const std::string& s = string_of(e, key + " element");
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
        config_error(e.source(), key + ": unknown value '" + s + "'" + did_you_mean(s, allowed, allowed));
      }
      v.push_back(s);
    }
    return [ref, v](Settings& s) { ref(s) = v; };
  };
  auto write = [key, ref](const Settings& s, toml::table& root) {
    toml::array a;
    for (const std::string& x : ref(s)) a.push_back(x);
    parent_table(root, key).insert_or_assign(last_component(key), std::move(a));
  };
  return {key, sweepable, parse, write};
}

const std::vector<std::string> kPromptKeys = {"id", "domain", "prompt", "messages"};
const std::vector<std::string> kMessageKeys = {"role", "content"};

// run.prompts[].messages: a non-empty array of tables {role, content}.
std::vector<ChatMessage> messages_of(const toml::node& n, const std::string& key) {
  std::vector<ChatMessage> messages;
  for (const toml::node& e : array_of(n, key)) {
    if (!e.is_table()) wrong_type(e, key + " element", "a table {role, content}");
    ChatMessage m;
    for (auto&& [k, v] : *e.as_table()) {
      const std::string name(k.str());
      if (name == "role") m.role = string_of(v, key + ".role");
      else if (name == "content") m.content = string_of(v, key + ".content");
      else config_error(k.source(), key + ": unknown key '" + name + "'" + did_you_mean(name, kMessageKeys, kMessageKeys));
    }
    if (m.role.empty() || !e.as_table()->contains("content")) config_error(e.source(), key + ": a message needs 'role' and 'content'");
    messages.push_back(std::move(m));
  }
  if (messages.empty()) config_error(n.source(), key + " must not be empty");
  return messages;
}

// run.prompts: strings, or tables {id, domain, prompt} or {id, domain, messages} (a chat).
ConfigField inline_prompts_field() {
  const std::string key = "run.prompts";
  auto parse = [key](const toml::node& n, const fs::path&) -> Assignment {
    std::vector<Prompt> prompts;
    for (const toml::node& e : array_of(n, key)) {
      Prompt p{"prompt-" + std::to_string(prompts.size()), "inline", "", {}, {}, {}};
      if (e.is_string()) {
        p.text = e.as_string()->get();
      } else if (e.is_table()) {
        bool has_text = false, has_messages = false;
        for (auto&& [k, v] : *e.as_table()) {
          const std::string name(k.str());
          if (name == "id") p.id = string_of(v, key + ".id");
          else if (name == "domain") p.domain = string_of(v, key + ".domain");
          else if (name == "prompt") p.text = string_of(v, key + ".prompt"), has_text = true;
          else if (name == "messages") p.messages = messages_of(v, key + ".messages"), has_messages = true;
          else config_error(k.source(), key + ": unknown key '" + name + "'" + did_you_mean(name, kPromptKeys, kPromptKeys));
        }
        if (has_text == has_messages) config_error(e.source(), key + ": a prompt table needs exactly one of 'prompt' and 'messages'");
      } else {
        wrong_type(e, key + " element", "a string or a table {id, domain, prompt} or {id, domain, messages}");
      }
      if (p.text.empty() && p.messages.empty()) config_error(e.source(), key + ": prompt '" + p.id + "' is empty");
      prompts.push_back(std::move(p));
    }
    if (prompts.empty()) config_error(n.source(), key + " must not be empty");
    return [prompts](Settings& s) { s.run.inline_prompts = prompts; };
  };
  auto write = [key](const Settings& s, toml::table& root) {
    if (s.run.inline_prompts.empty()) return;
    toml::array a;
    for (const Prompt& p : s.run.inline_prompts) {
      toml::table t{{"id", p.id}, {"domain", p.domain}};
      if (p.messages.empty()) {
        t.insert("prompt", p.text);
      } else {
        toml::array messages;
        for (const ChatMessage& m : p.messages) messages.push_back(toml::table{{"role", m.role}, {"content", m.content}});
        t.insert("messages", std::move(messages));
      }
      a.push_back(std::move(t));
    }
    parent_table(root, key).insert_or_assign("prompts", std::move(a));
  };
  return {key, false, parse, write};
}

// `field`, written only when output.logprobs is set (it does not apply otherwise).
ConfigField written_with_logprobs(ConfigField field) {
  field.write = [write = field.write](const Settings& s, toml::table& root) {
    if (s.point.logprobs) write(s, root);
  };
  return field;
}

std::vector<ConfigField> make_fields() {
  auto at_least_zero = [](double v) { return v >= 0; };
  return {
      string_field("title", [](auto& s) -> auto& { return s.title; }, false),
      path_field("target.path", [](auto& s) -> auto& { return s.point.target; }, PathKind::model_dir, true),
      weights_field("target.weights", [](auto& s) -> auto& { return s.point.target_weights; }),
      string_field("draft.name", [](auto& s) -> auto& { return s.point.draft_name; }),
      enum_field("draft.method", [](auto& s) -> auto& { return s.point.draft.method; }),
      path_field("draft.path", [](auto& s) -> auto& { return s.point.draft.model_dir; }, PathKind::model_dir, true),
      weights_field("draft.weights", [](auto& s) -> auto& { return s.point.draft.weights; }),
      int_field("draft.gamma", [](auto& s) -> auto& { return s.point.draft.gamma; }, 1),
      int_list_field<int>("draft.tree", [](auto& s) -> auto& { return s.point.draft.tree; }, 1, true, true),
      int_field("draft.budget", [](auto& s) -> auto& { return s.point.draft.tree_budget; }, 0),
      number_rows_field("draft.sequoia", [](auto& s) -> auto& { return s.point.draft.sequoia; }),
      int_field("draft.siblings", [](auto& s) -> auto& { return s.point.draft.siblings; }, 0),
      bool_field("draft.adaptive", [](auto& s) -> auto& { return s.point.draft.adaptive; }),
      int_field("draft.ngram_min", [](auto& s) -> auto& { return s.point.draft.ngram_min; }, 1),
      int_field("draft.ngram_max", [](auto& s) -> auto& { return s.point.draft.ngram_max; }, 1),
      enum_field("draft.gamma_policy", [](auto& s) -> auto& { return s.point.gamma_policy; }),
      double_field("draft.stop_below", [](auto& s) -> auto& { return s.point.length_threshold.stop_below; }, 0, 1),
      int_field("draft.max_batch", [](auto& s) -> auto& { return s.point.length_threshold.max_batch; }, 0),
      enum_field("verify.rule", [](auto& s) -> auto& { return s.point.verify_rule; }),
      string_field("sampling.name", [](auto& s) -> auto& { return s.point.sampling_name; }),
      enum_field("sampling.strategy", [](auto& s) -> auto& { return s.point.sampling.strategy; }),
      float_field("sampling.temperature", [](auto& s) -> auto& { return s.point.sampling.temperature; }, at_least_zero, ">= 0"),
      int_field("sampling.top_k", [](auto& s) -> auto& { return s.point.sampling.top_k; }, 0),
      float_field("sampling.top_p", [](auto& s) -> auto& { return s.point.sampling.top_p; },
                  [](double v) { return v > 0 && v <= 1; }, "in (0, 1]"),
      float_field("sampling.min_p", [](auto& s) -> auto& { return s.point.sampling.min_p; },
                  [](double v) { return v >= 0 && v <= 1; }, "in [0, 1]"),
      int_field("sampling.beam_width", [](auto& s) -> auto& { return s.point.sampling.beam_width; }, 1),
      float_field("sampling.repetition_penalty", [](auto& s) -> auto& { return s.point.controls.repetition_penalty; },
                  [](double v) { return v > 0; }, "> 0"),
      float_field("sampling.frequency_penalty", [](auto& s) -> auto& { return s.point.controls.frequency_penalty; },
                  [](double v) { return v >= -2 && v <= 2; }, "in [-2, 2]"),
      float_field("sampling.presence_penalty", [](auto& s) -> auto& { return s.point.controls.presence_penalty; },
                  [](double v) { return v >= -2 && v <= 2; }, "in [-2, 2]"),
      int_field("sampling.no_repeat_ngram_size", [](auto& s) -> auto& { return s.point.controls.no_repeat_ngram_size; }, 0),
      logit_bias_field("sampling.logit_bias", [](auto& s) -> auto& { return s.point.controls.logit_bias; }),
      int_list_field<int>("sampling.banned_tokens", [](auto& s) -> auto& { return s.point.controls.banned_tokens; }, 0,
                          true, true),
      int_field("sampling.min_new_tokens", [](auto& s) -> auto& { return s.point.controls.min_new_tokens; }, 0),
      string_list_field("sampling.stop_strings", [](auto& s) -> auto& { return s.point.stop_strings; }, {}, true),
      float_field("sampling.length_penalty", [](auto& s) -> auto& { return s.point.sampling.length_penalty; },
                  at_least_zero, ">= 0"),
      path_field("run.prompts_file", [](auto& s) -> auto& { return s.run.prompts_file; }, PathKind::file, false),
      inline_prompts_field(),
      string_list_field("run.domains", [](auto& s) -> auto& { return s.run.domains; }, {}),
      int_field("run.prompts_per_domain", [](auto& s) -> auto& { return s.run.prompts_per_domain; }, 0, false),
      int_field("run.max_new_tokens", [](auto& s) -> auto& { return s.point.max_new_tokens; }, 1),
      int_list_field<uint64_t>("run.seeds", [](auto& s) -> auto& { return s.run.seeds; }, 0, false, false),
      int_field("run.repetitions", [](auto& s) -> auto& { return s.run.repetitions; }, 1, false, kMaxRepetitions),
      enum_field("run.backend", [](auto& s) -> auto& { return s.point.backend; }),
      int_field("run.threads", [](auto& s) -> auto& { return s.point.threads; }, 0),
      int_field("run.kv_block_size", [](auto& s) -> auto& { return s.point.kv_block_size; }, 1),
      int_field("run.kv_pool_blocks", [](auto& s) -> auto& { return s.point.kv_pool_blocks; }, 0),
      int_field("run.batch_size", [](auto& s) -> auto& { return s.point.batch_size; }, 0, true, kMaxBatchSize),
      double_field("run.request_rate", [](auto& s) -> auto& { return s.point.request_rate; }, 0, kMaxRequestRate),
      kv_dtype_field("run.kv_dtype", [](auto& s) -> auto& { return s.point.kv_dtype; }),
      path_field("output.directory", [](auto& s) -> auto& { return s.output.directory; }, PathKind::output_dir, false),
      string_list_field("output.formats", [](auto& s) -> auto& { return s.output.formats; }, {"csv", "md", "png"}),
      optional_int_field("output.logprobs", [](auto& s) -> auto& { return s.point.logprobs; }, 0, kMaxLogprobs, false),
      written_with_logprobs(enum_field("output.logprobs_source", [](auto& s) -> auto& { return s.point.logprobs_source; }, false)),
  };
}

}  // namespace

std::string resolve_path(const fs::path& dir, const std::string& given) {
  // A name the file system refuses (a component over NAME_MAX, ...) stays as written,
  // normalised: the caller's existence check then names the key and the value.
  std::error_code refused;
  const fs::path resolved = fs::weakly_canonical(dir / given, refused);
  return (refused ? (dir / given).lexically_normal() : resolved).string();
}

double as_written(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.7g", static_cast<double>(v));
  return std::strtod(text, nullptr);
}

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = make_fields();
  return fields;
}

const ConfigField* find_config_field(std::string_view key) {
  for (const ConfigField& f : config_fields()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::vector<std::string> config_keys(std::string_view section) {
  std::vector<std::string> keys;
  const std::string prefix = section.empty() ? "" : std::string(section) + ".";
  for (const ConfigField& f : config_fields()) {
    if (f.key.starts_with(prefix)) keys.push_back(f.key);
  }
  return keys;
}

std::vector<std::string> sweepable_keys() {
  std::vector<std::string> keys = {"target", "draft", "sampling", "run"};
  for (const ConfigField& f : config_fields()) {
    if (f.sweepable) keys.push_back(f.key);
  }
  return keys;
}

const ConfigField& known_field(const std::string& key, const toml::source_region& where,
                               const std::vector<std::string>& candidates, const std::vector<std::string>& valid) {
  const ConfigField* f = find_config_field(key);
  if (!f) config_error(where, "unknown key '" + key + "'" + did_you_mean(key, candidates, valid));
  return *f;
}

std::string source_location(const toml::source_region& region) {
  return (region.path ? *region.path : std::string("<config>")) + ":" + std::to_string(region.begin.line) + ":" +
         std::to_string(region.begin.column);
}

void config_error(const toml::source_region& region, const std::string& message) {
  if (!region.path && region.begin.line == 0) throw SpeculaError(message);  // a node built in code, from no file
  throw SpeculaError(source_location(region) + ": " + message);
}

std::string toml_text(const toml::node& node) {
  std::ostringstream out;
  // Strings are written as basic strings, control characters escaped: toml++ writes a newline
  // into a literal string (where TOML forbids it) or right after a multi-line string's opening
  // quotes (where reading drops it).
  const auto flags = (toml::toml_formatter::default_flags & ~toml::format_flags::allow_multi_line_strings &
                      ~toml::format_flags::allow_literal_strings) |
                     toml::format_flags::relaxed_float_precision;
  out << toml::toml_formatter(node, flags);
  return out.str();
}

std::string render_value(const toml::node& value) {
  if (const auto* s = value.as_string()) return s->get();
  if (const auto* a = value.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) {
      if (i) out += ",";
      out += render_value(*a->get(i));
    }
    return out + "]";
  }
  if (const auto* t = value.as_table()) {
    std::string out = "{";
    for (auto&& [k, v] : *t) {
      if (out.size() > 1) out += ",";
      out += std::string(k.str()) + "=" + render_value(v);
    }
    return out + "}";
  }
  if (const auto* f = value.as_floating_point()) {
    char text[32];
    std::snprintf(text, sizeof text, "%.15g", f->get());
    return text;
  }
  std::ostringstream out;
  value.visit([&](const auto& v) { out << v; });
  return out.str();
}

}  // namespace specula
