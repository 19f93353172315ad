// defines: CompletionRequest, what one OpenAI completions or chat completions body asks for,
// and parse_completion_request, the one reader of those bodies: JSON types, ranges and field
// names checked here, OpenAI's sampling fields mapped to config keys (configs/README.md) beside
// the body's own "specula" object of config keys. RequestError is a refusal with its HTTP status.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "experiments/config.h"

namespace specula::server {

enum class Endpoint { kCompletions, kChatCompletions };

// A refusal: the HTTP status, OpenAI's error type and the body field it is about ("" for none).
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error")
      : std::runtime_error(std::move(message)), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;
  std::string type;
};

// Most samples (`n`) one request may ask for.
inline constexpr int kMaxChoices = 128;
// Most stop strings one request may give (OpenAI's limit).
inline constexpr int kMaxStops = 4;
// Most alternatives per token: completions' "logprobs", chat's "top_logprobs" (OpenAI's limits).
inline constexpr int kMaxCompletionLogprobs = 5;
inline constexpr int kMaxChatLogprobs = 20;

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  Prompt prompt;  // completions: text or ids; chat: messages
  // Config keys the request sets: OpenAI's fields mapped (temperature -> sampling.strategy and
  // sampling.temperature, max_tokens -> run.max_new_tokens, ...), then the "specula" object's.
  nlohmann::json keys = nlohmann::json::object();
  // For each key of `keys`, the body field that set it ("temperature", "specula.draft.gamma").
  std::map<std::string, std::string, std::less<>> key_fields;
  uint64_t seed = 0;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
};

// Reads `body` for `endpoint`. Throws RequestError: 400 for malformed JSON, a field of the
// wrong type or out of range, a field OpenAI does not define, or one of OpenAI's this server
// does not implement set to other than its default; 404 for a model other than `served_model`.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body, std::string_view served_model);

}  // namespace specula::server
