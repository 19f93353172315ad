// defines: the OpenAI shapes of what the server answers: a whole completion or chat
// completion, the chunks of a streamed one, and error bodies; each built from a request and
// the `specula generate --json` object of its result.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "sampling/token_logprob.h"
#include "server/openai_request.h"
#include "text/tokenizer.h"

namespace specula::server {

// What every response of one request repeats.
struct ResponseHeader {
  std::string id;  // "cmpl-N" / "chatcmpl-N"
  long long created = 0;  // Unix seconds
  std::string model;
};

// One token of a choice's logprobs: its text (Tokenizer::decode_piece after the tokens before
// it) and where it begins in the choice's text, its log-probability, the alternatives' texts
// and values (most probable first).
struct LogprobToken {
  std::string text;
  std::size_t offset = 0;
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;
};

// `logprob` of the token after `previous`, its text beginning at byte `offset`.
LogprobToken logprob_token(const Tokenizer& tokenizer, std::span<const int> previous, const TokenLogprob& logprob,
                           std::size_t offset);

// Whether a choice's logprobs hold `token`: the tokens whose text lies in or begins in the
// choice's text, `kept` bytes; every token where `cut` is false (no stop string cut the text).
bool logprobs_hold(const LogprobToken& token, std::size_t kept, bool cut);

// One choice's logprobs of `tokens` in the endpoint's shape: completions' {"tokens",
// "token_logprobs", "top_logprobs" (null where `top` is 0), "text_offset"}, chat's {"content":
// [{"token", "logprob", "bytes", "top_logprobs"}], "refusal"}. A stream's chunks each hold
// their share: the chunks' lists joined are the whole response's.
nlohmann::json choice_logprobs(const CompletionRequest& request, std::span<const LogprobToken> tokens, int top);

// {"prompt_tokens", "completion_tokens", "total_tokens"} of a result (every choice's tokens).
nlohmann::json usage(const nlohmann::json& result);

// The whole response: "text_completion" or "chat.completion", a choice per sample with its
// text (or assistant message), finish_reason and, when asked for, logprobs in the endpoint's
// shape (choice_logprobs of the tokens logprobs_hold keeps), the usage, and
// "specula": the result's stats.
nlohmann::json completion_response(const CompletionRequest& request, const ResponseHeader& header,
                                   const nlohmann::json& result, const Tokenizer& tokenizer);

// One streamed chunk of choice `index`: a text delta (chat: {"content"}; the first chunk of a
// chat choice carries {"role": "assistant"}) with its `logprobs` (choice_logprobs; null when
// not asked for), or with `finish_reason` the choice's last.
nlohmann::json stream_chunk(const CompletionRequest& request, const ResponseHeader& header, int index,
                            std::string_view text, bool first, const std::optional<std::string>& finish_reason,
                            nlohmann::json logprobs = nullptr);
// A result's finish reasons, one per choice, in OpenAI's words ("stop" or "length").
std::vector<std::string> finish_reasons(const nlohmann::json& result);
// The chunk after the last choice's with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const CompletionRequest& request, const ResponseHeader& header, const nlohmann::json& result);

// {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_body(const RequestError& error);

// `value` as JSON text; invalid UTF-8 in a string becomes U+FFFD.
std::string json_text(const nlohmann::json& value);

}  // namespace specula::server
