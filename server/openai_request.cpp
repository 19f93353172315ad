#include "server/openai_request.h"

#include <climits>
#include <optional>
#include <set>
#include <sstream>

#include "base/error.h"
#include "experiments/prompts.h"

namespace specula::server {
namespace {

using nlohmann::json;

// The body's value, shortened for a message.
std::string shown(const json& value) {
  std::string text = value.dump();
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

[[noreturn]] void refuse(const std::string& field, const std::string& rule, const json& value) {
  throw RequestError(400, "'" + field + "' " + rule + ", got " + shown(value), field);
}

double number_in(const json& value, const std::string& field, double low, double high, bool open_low = false) {
  if (!value.is_number()) refuse(field, "must be a number", value);
  const double x = value.get<double>();
  if (x < low || x > high || (open_low && x == low)) {
    std::ostringstream range;
    range << "must be in " << (open_low ? "(" : "[") << low << ", " << high << "]";
    refuse(field, range.str(), value);
  }
  return x;
}

long long integer_in(const json& value, const std::string& field, long long low, long long high) {
  if (!value.is_number_integer()) refuse(field, "must be an integer", value);
  if (value.is_number_unsigned() && value.get<unsigned long long>() > static_cast<unsigned long long>(LLONG_MAX))
    refuse(field, "must be in [" + std::to_string(low) + ", " + std::to_string(high) + "]", value);
  const long long x = value.get<long long>();
  if (x < low || x > high) refuse(field, "must be in [" + std::to_string(low) + ", " + std::to_string(high) + "]", value);
  return x;
}

// OpenAI's fields this server does not implement, with the value that asks for nothing
// (null always does too): a request setting one otherwise is refused.
const std::map<std::string, json, std::less<>>& unimplemented(Endpoint endpoint) {
  static const std::map<std::string, json, std::less<>> completions = {
      {"suffix", ""}, {"echo", false}, {"best_of", 1}, {"logit_bias", json::object()}};
  static const std::map<std::string, json, std::less<>> chat = {
      {"logit_bias", json::object()},
      {"tools", json::array()},  {"tool_choice", "none"},       {"functions", json::array()},
      {"function_call", "none"}, {"parallel_tool_calls", true}, {"response_format", {{"type", "text"}}},
      {"modalities", {"text"}},  {"audio", nullptr},            {"prediction", nullptr},
      {"reasoning_effort", nullptr}, {"web_search_options", nullptr}};
  return endpoint == Endpoint::kCompletions ? completions : chat;
}

// OpenAI's fields that change nothing here, taken with any value.
bool ignored(std::string_view field) {
  return field == "user" || field == "metadata" || field == "store" || field == "service_tier";
}

const std::set<std::string, std::less<>>& implemented(Endpoint endpoint) {
  static const std::set<std::string, std::less<>> completions = {
      "model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p", "n", "stop", "seed",
      "presence_penalty", "frequency_penalty", "logprobs", "specula"};
  static const std::set<std::string, std::less<>> chat = {
      "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p",
      "n", "stop", "seed", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "specula"};
  return endpoint == Endpoint::kCompletions ? completions : chat;
}

// Sets config key `key` from body field `field`.
void set_key(CompletionRequest& r, const std::string& key, json value, const std::string& field) {
  r.keys[key] = std::move(value);
  r.key_fields[key] = field;
}

Prompt read_completion_prompt(const json& prompt) {
  Prompt p;
  if (prompt.is_string()) {
    p.text = prompt.get<std::string>();
    if (p.text.empty()) refuse("prompt", "must not be empty", prompt);
    return p;
  }
  if (!prompt.is_array() || prompt.empty())
    refuse("prompt", "must be a non-empty string or a non-empty array of token ids (one prompt per request)", prompt);
  for (const json& id : prompt) {
    if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT_MAX)
      refuse("prompt", "must be a non-empty string or a non-empty array of token ids (one prompt per request)", prompt);
    p.ids.push_back(id.get<int>());
  }
  return p;
}

void read_stop(CompletionRequest& r, const json& stop) {
  json stops = json::array();
  if (stop.is_string()) {
    stops.push_back(stop);
  } else if (stop.is_array()) {
    stops = stop;
  } else {
    refuse("stop", "must be a string or an array of strings", stop);
  }
  if (static_cast<int>(stops.size()) > kMaxStops) refuse("stop", "must hold at most " + std::to_string(kMaxStops) + " strings", stop);
  for (const json& s : stops)
    if (!s.is_string() || s.get<std::string>().empty()) refuse("stop", "must hold non-empty strings", stop);
  if (!stops.empty()) set_key(r, "sampling.stop_strings", stops, "stop");
}

// Completions: "logprobs": N alternatives (0-5); chat: "logprobs": true and "top_logprobs": N
// (0-20). Both -> output.logprobs N, whole or streamed.
void read_logprobs(CompletionRequest& r, const json& j) {
  const auto given = [&j](const char* field) { return j.contains(field) && !j[field].is_null(); };
  std::optional<long long> top;
  if (r.endpoint == Endpoint::kCompletions) {
    if (given("logprobs")) top = integer_in(j["logprobs"], "logprobs", 0, kMaxCompletionLogprobs);
  } else {
    if (given("logprobs") && !j["logprobs"].is_boolean()) refuse("logprobs", "must be a boolean", j["logprobs"]);
    const bool wanted = given("logprobs") && j["logprobs"].get<bool>();
    if (given("top_logprobs")) {
      if (!wanted) refuse("top_logprobs", "needs \"logprobs\": true", j["top_logprobs"]);
      top = integer_in(j["top_logprobs"], "top_logprobs", 0, kMaxChatLogprobs);
    } else if (wanted) {
      top = 0;
    }
  }
  if (!top) return;
  const char* field = r.endpoint == Endpoint::kCompletions || !given("top_logprobs") ? "logprobs" : "top_logprobs";
  set_key(r, "output.logprobs", *top, field);
}

}  // namespace

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body, std::string_view served_model) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw RequestError(400, "the body is not valid JSON");
  if (!j.is_object()) throw RequestError(400, "the body must be a JSON object, got " + shown(j));
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChatCompletions;
  for (const auto& [field, value] : j.items()) {
    if (implemented(endpoint).contains(field) || ignored(field)) continue;
    const auto& defaults = unimplemented(endpoint);
    if (const auto it = defaults.find(field); it != defaults.end()) {
      if (value.is_null() || value == it->second) continue;
      throw RequestError(400, "'" + field + "' is not supported by this server, got " + shown(value), field);
    }
    throw RequestError(400, "unknown field '" + field + "'", field);
  }
  const auto given = [&j](const char* field) { return j.contains(field) && !j[field].is_null(); };

  if (!given("model")) throw RequestError(400, "'model' is required", "model");
  if (!j["model"].is_string()) refuse("model", "must be a string", j["model"]);
  r.model = j["model"].get<std::string>();
  if (r.model != served_model)
    throw RequestError(404, "the model '" + r.model + "' does not exist; this server serves '" + std::string(served_model) + "'",
                       "model");

  if (chat) {
    if (!given("messages")) throw RequestError(400, "'messages' is required", "messages");
    try {
      r.prompt.messages = read_messages(j["messages"], "messages");
    } catch (const SpeculaError& e) {
      throw RequestError(400, e.what(), "messages");
    }
  } else {
    if (!given("prompt")) throw RequestError(400, "'prompt' is required", "prompt");
    r.prompt = read_completion_prompt(j["prompt"]);
  }

  if (given("stream")) {
    if (!j["stream"].is_boolean()) refuse("stream", "must be a boolean", j["stream"]);
    r.stream = j["stream"].get<bool>();
  }
  if (given("stream_options")) {
    const json& o = j["stream_options"];
    if (!r.stream) refuse("stream_options", "is only allowed with \"stream\": true", o);
    if (!o.is_object()) refuse("stream_options", "must be an object", o);
    for (const auto& [key, value] : o.items()) {
      if (key != "include_usage") throw RequestError(400, "unknown field 'stream_options." + key + "'", "stream_options." + key);
      if (!value.is_boolean()) refuse("stream_options.include_usage", "must be a boolean", value);
      r.include_usage = value.get<bool>();
    }
  }

  const char* length_field = nullptr;
  for (const char* field : {"max_completion_tokens", "max_tokens"}) {
    if (!given(field) || (!chat && std::string_view(field) == "max_completion_tokens")) continue;
    const long long tokens = integer_in(j[field], field, 1, INT_MAX);
    if (length_field && j[length_field] != j[field])
      throw RequestError(400, std::string("'max_tokens' (") + j["max_tokens"].dump() + ") and 'max_completion_tokens' (" +
                                  j["max_completion_tokens"].dump() + ") differ",
                         field);
    if (!length_field) set_key(r, "run.max_new_tokens", tokens, field);
    length_field = field;
  }

  bool greedy = false;
  if (given("temperature")) {
    const double t = number_in(j["temperature"], "temperature", 0, 2);
    greedy = t == 0;
    set_key(r, "sampling.strategy", greedy ? "greedy" : "sample", "temperature");
    if (!greedy) set_key(r, "sampling.temperature", t, "temperature");
  }
  // Greedy decoding ignores top_p, as OpenAI's temperature 0 does.
  if (given("top_p") && !greedy) set_key(r, "sampling.top_p", number_in(j["top_p"], "top_p", 0, 1, /*open_low=*/true), "top_p");
  for (const char* field : {"presence_penalty", "frequency_penalty"})
    if (given(field)) set_key(r, std::string("sampling.") + field, number_in(j[field], field, -2, 2), field);
  if (given("n")) r.n = static_cast<int>(integer_in(j["n"], "n", 1, kMaxChoices));
  if (given("seed")) {
    const json& seed = j["seed"];
    if (!seed.is_number_integer() || (!seed.is_number_unsigned() && seed.get<long long>() < 0))
      refuse("seed", "must be an integer >= 0", seed);
    r.seed = seed.get<uint64_t>();
  }
  if (given("stop")) read_stop(r, j["stop"]);
  read_logprobs(r, j);

  if (given("specula")) {
    const json& own = j["specula"];
    if (!own.is_object()) refuse("specula", "must be an object of config keys", own);
    for (const auto& [key, value] : own.items()) {
      const std::string field = "specula." + key;
      if (const auto it = r.key_fields.find(key); it != r.key_fields.end())
        throw RequestError(400, "'" + field + "' and '" + it->second + "' both set " + key, field);
      set_key(r, key, value, field);
    }
  }
  return r;
}

}  // namespace specula::server
