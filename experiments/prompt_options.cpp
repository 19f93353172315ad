#include "experiments/prompt_options.h"

#include <toml++/toml.h>

#include <algorithm>
#include <memory>
#include <string_view>

#include "base/error.h"
#include "experiments/config.h"
#include "experiments/config_fields.h"
#include "experiments/suggest.h"

namespace specula {
namespace {

bool per_request(std::string_view key) {
  if (key == "sampling.name" || key == "draft.name") return false;  // display names of a sweep's runs
  return key.starts_with("sampling.") || key.starts_with("draft.") || key.starts_with("verify.") ||
         key == "run.max_new_tokens" || key == "output.logprobs" || key == "output.logprobs_source";
}

std::vector<std::string> per_request_keys() {
  std::vector<std::string> keys;
  for (const ConfigField& f : config_fields())
    if (per_request(f.key)) keys.push_back(f.key);
  return keys;
}

// `value` as the TOML node its config key would be written as; nullptr for JSON null.
std::unique_ptr<toml::node> toml_node(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::boolean: return std::make_unique<toml::value<bool>>(value.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return std::make_unique<toml::value<int64_t>>(value.get<int64_t>());
    case nlohmann::json::value_t::number_float: return std::make_unique<toml::value<double>>(value.get<double>());
    case nlohmann::json::value_t::string: return std::make_unique<toml::value<std::string>>(value.get<std::string>());
    case nlohmann::json::value_t::array: {
      auto array = std::make_unique<toml::array>();
      for (const nlohmann::json& e : value) {
        std::unique_ptr<toml::node> node = toml_node(e);
        SPECULA_CHECK(node, "null is not a value");
        array->push_back(std::move(*node));
      }
      return array;
    }
    case nlohmann::json::value_t::object: {
      auto table = std::make_unique<toml::table>();
      for (const auto& [k, e] : value.items()) {
        std::unique_ptr<toml::node> node = toml_node(e);
        SPECULA_CHECK(node, "null is not a value");
        table->insert(k, std::move(*node));
      }
      return table;
    }
    default: return nullptr;
  }
}


}  // namespace

void apply_prompt_options(const nlohmann::json& options, GenerateOptions& request, const std::filesystem::path& dir,
                          std::string_view shared_where) {
  if (options.is_null()) return;
  SPECULA_CHECK(options.is_object(), "options must be an object of config keys, got ", options.dump());
  Settings settings;
  settings.point = point_config(request);
  for (const auto& [key, value] : options.items()) {
    const ConfigField* field = find_config_field(key);
    if (!field) {
      const std::vector<std::string> keys = per_request_keys();
      throw SpeculaError(detail::concat("options: unknown key '", key, "'", did_you_mean(key, keys, keys)));
    }
    SPECULA_CHECK(per_request(key), "options.", key, " is shared by every request of the batch: set it ", shared_where);
    const std::unique_ptr<toml::node> node = toml_node(value);
    SPECULA_CHECK(node, "options.", key, " is null");
    try {
      field->parse(*node, dir)(settings);
    } catch (const SpeculaError& e) {
      throw SpeculaError(std::string("options.") + e.what());
    }
  }
  GenerateOptions changed = request_options(settings.point);
  changed.prompt_ids = std::move(request.prompt_ids);
  changed.seed = request.seed;
  changed.num_samples = request.num_samples;
  request = std::move(changed);
}

OptionNames prompt_option_names(const nlohmann::json& options, OptionNames names) {
  if (!options.is_object()) return names;
  const auto set = [options](std::string_view key) { return options.contains(std::string(key)); };
  names.name = [set, name = names.name](std::string_view key) {
    return set(key) ? "options." + std::string(key) : name(key);
  };
  names.given = [set, given = names.given](std::string_view key) { return set(key) || given(key); };
  return names;
}

}  // namespace specula
