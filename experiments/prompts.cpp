#include "experiments/prompts.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "experiments/suggest.h"

namespace specula {
namespace {

std::string origin_of(const Origins& origins, const std::string& key, const std::string& config_file) {
  const auto it = origins.find(key);
  return it == origins.end() ? config_file : it->second;
}

}  // namespace

std::vector<ChatMessage> read_messages(const nlohmann::json& j, const std::string& where) {
  SPECULA_CHECK(j.is_array() && !j.empty(), where, ": field 'messages' must be a non-empty array of {role, content}, got ",
                j.dump());
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : j) {
    SPECULA_CHECK(m.is_object() && m.size() == 2 && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                      m["content"].is_string() && !m["role"].get<std::string>().empty(),
                  where, ": each of 'messages' must be {\"role\": string, \"content\": string}, got ", m.dump());
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

std::vector<Prompt> read_prompts_file(const std::string& path, const std::string& option, DomainField domain) {
  std::ifstream in(path);
  SPECULA_CHECK(in, option, ": cannot open '", path, "'");
  std::vector<Prompt> prompts;
  std::set<std::string> ids;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = option + " " + path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    SPECULA_CHECK(j.is_object(), where, ": not a JSON object");
    Prompt p;
    const std::pair<const char*, std::string*> fields[] = {{"id", &p.id}, {"domain", &p.domain}};
    for (auto [field, target] : fields) {
      if (!j.contains(field) && field == std::string("domain") && domain == DomainField::kOptional) continue;
      SPECULA_CHECK(j.contains(field) && j[field].is_string(), where, ": missing string field '", field, "'");
      *target = j[field].get<std::string>();
    }
    SPECULA_CHECK(ids.insert(p.id).second, where, ": prompt id '", p.id, "' appears twice");
    SPECULA_CHECK(j.contains("prompt") + j.contains("messages") + j.contains("prompt_ids") == 1, where, ": prompt '", p.id,
                  "' needs exactly one of 'prompt' (a string), 'messages' (a chat) and 'prompt_ids' (token ids)");
    if (j.contains("prompt")) {
      SPECULA_CHECK(j["prompt"].is_string(), where, ": field 'prompt' must be a string, got ", j["prompt"].dump());
      p.text = j["prompt"].get<std::string>();
      SPECULA_CHECK(!p.text.empty(), where, ": prompt '", p.id, "' is empty");
    } else if (j.contains("messages")) {
      p.messages = read_messages(j["messages"], where);
    } else {
      const nlohmann::json& list = j["prompt_ids"];
      SPECULA_CHECK(list.is_array() && !list.empty(), where, ": 'prompt_ids' must be a non-empty list of integers");
      for (const nlohmann::json& id : list) {
        SPECULA_CHECK(id.is_number_integer() && id.get<long long>() >= 0 && id.get<long long>() <= INT_MAX, where,
                      ": 'prompt_ids' holds ", id.dump(), ", not a token id (an integer >= 0)");
        p.ids.push_back(id.get<int>());
      }
    }
    if (j.contains("options")) p.options = j["options"];
    prompts.push_back(std::move(p));
  }
  SPECULA_CHECK(!prompts.empty(), option, ": '", path, "' holds no prompts");
  return prompts;
}

std::vector<Prompt> select_prompts(const RunConfig& run, const Origins& origins, const std::string& config_file) {
  const std::vector<Prompt> all = run.prompts_file.empty() ? run.inline_prompts
                                                        : read_prompts_file(run.prompts_file, "run.prompts_file", DomainField::kRequired);

  std::set<std::string> ids;
  std::vector<std::string> domains;  // in order of first appearance
  for (const Prompt& p : all) {
    SPECULA_CHECK(ids.insert(p.id).second, origin_of(origins, run.prompts_file.empty() ? "run.prompts" : "run.prompts_file",
                                                    config_file), ": prompt id '", p.id, "' appears twice");
    if (std::find(domains.begin(), domains.end(), p.domain) == domains.end()) domains.push_back(p.domain);
    SPECULA_CHECK(p.options.is_null(), origin_of(origins, "run.prompts_file", config_file), ": prompt '", p.id,
                  "' has per-request 'options' (those are for specula generate --prompts-file; an experiment sets "
                  "config keys, and sweeps them)");
  }
  for (const std::string& d : run.domains) {
    SPECULA_CHECK(std::find(domains.begin(), domains.end(), d) != domains.end(), origin_of(origins, "run.domains", config_file),
                  ": run.domains: no prompt has domain '", d, "'", did_you_mean(d, domains, domains));
  }

  std::vector<Prompt> selected;
  std::map<std::string, int> taken;
  for (const Prompt& p : all) {
    const bool wanted = run.domains.empty() || std::find(run.domains.begin(), run.domains.end(), p.domain) != run.domains.end();
    if (!wanted || (run.prompts_per_domain > 0 && taken[p.domain] >= run.prompts_per_domain)) continue;
    ++taken[p.domain];
    selected.push_back(p);
  }
  return selected;
}

}  // namespace specula
