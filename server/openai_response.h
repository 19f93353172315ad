// defines: the OpenAI shapes of what the server answers: a whole completion or chat
// completion, the chunks of a streamed one, and error bodies; each built from a request and
// the `specula generate --json` object of its result.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai_request.h"
#include "text/tokenizer.h"

namespace specula::server {

// What every response of one request repeats.
struct ResponseHeader {
  std::string id;  // "cmpl-N" / "chatcmpl-N"
  long long created = 0;  // Unix seconds
  std::string model;
};

// {"prompt_tokens", "completion_tokens", "total_tokens"} of a result (every choice's tokens).
nlohmann::json usage(const nlohmann::json& result);

// The whole response: "text_completion" or "chat.completion", a choice per sample with its
// text (or assistant message), finish_reason and, when asked for, logprobs in the endpoint's
// shape (tokens as `tokenizer` decodes each after the ones before it), the usage, and
// "specula": the result's stats.
nlohmann::json completion_response(const CompletionRequest& request, const ResponseHeader& header,
                                   const nlohmann::json& result, const Tokenizer& tokenizer);

// One streamed chunk of choice `index`: a text delta (chat: {"content"}; the first chunk of a
// chat choice carries {"role": "assistant"}), or with `finish_reason` the choice's last.
nlohmann::json stream_chunk(const CompletionRequest& request, const ResponseHeader& header, int index,
                            std::string_view text, bool first, const std::optional<std::string>& finish_reason);
// A result's finish reasons, one per choice, in OpenAI's words ("stop" or "length").
std::vector<std::string> finish_reasons(const nlohmann::json& result);
// The chunk after the last choice's with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const CompletionRequest& request, const ResponseHeader& header, const nlohmann::json& result);

// {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_body(const RequestError& error);

// `value` as JSON text; invalid UTF-8 in a string becomes U+FFFD.
std::string json_text(const nlohmann::json& value);

}  // namespace specula::server
