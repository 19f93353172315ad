#include "server/openai_response.h"

#include <algorithm>
#include <span>

namespace specula::server {
namespace {

using nlohmann::json;

bool is_chat(const CompletionRequest& request) { return request.endpoint == Endpoint::kChatCompletions; }

// OpenAI's reason for a `specula generate` finish_reason: an end-of-sequence token or a stop
// string is "stop", the token limit "length".
std::string openai_reason(const json& reason) { return reason == "length" ? "length" : "stop"; }

std::vector<std::string> texts(const json& result) {
  if (result.contains("sample_texts")) return result["sample_texts"].get<std::vector<std::string>>();
  return {result["text"].get<std::string>()};
}

std::vector<int> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// The fields every response and chunk of `request` begins with; `chunk`: a streamed one.
json envelope(const CompletionRequest& request, const ResponseHeader& header, bool chunk) {
  const char* object = !is_chat(request) ? "text_completion" : chunk ? "chat.completion.chunk" : "chat.completion";
  return {{"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

// One choice's logprobs: completions' {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"} or chat's {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}, from
// the result's per-token entries {"token", "logprob", "top": [{"token", "logprob"}]} of `ids`.
json choice_logprobs(const CompletionRequest& request, const Tokenizer& tokenizer, const std::vector<int>& ids,
                     const json& entries, int top) {
  const std::size_t count = std::min(ids.size(), entries.size());
  const auto piece = [&](std::size_t i, int token) { return tokenizer.decode_piece(std::span(ids).first(i), token); };
  if (is_chat(request)) {
    json content = json::array();
    for (std::size_t i = 0; i < count; ++i) {
      const std::string text = piece(i, ids[i]);
      json alternatives = json::array();
      for (const json& alt : entries[i]["top"]) {
        const std::string alt_text = piece(i, alt["token"].get<int>());
        alternatives.push_back({{"token", alt_text}, {"logprob", alt["logprob"]}, {"bytes", bytes_of(alt_text)}});
      }
      content.push_back({{"token", text}, {"logprob", entries[i]["logprob"]}, {"bytes", bytes_of(text)},
                         {"top_logprobs", std::move(alternatives)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  std::size_t offset = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string text = piece(i, ids[i]);
    tokens.push_back(text);
    logprobs.push_back(entries[i]["logprob"]);
    offsets.push_back(offset);
    offset += text.size();
    json alternatives = json::object();
    for (const json& alt : entries[i]["top"]) alternatives[piece(i, alt["token"].get<int>())] = alt["logprob"];
    tops.push_back(std::move(alternatives));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", top > 0 ? std::move(tops) : json(nullptr)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace

std::vector<std::string> finish_reasons(const json& result) {
  std::vector<std::string> reasons;
  if (result.contains("finish_reasons")) {
    for (const json& r : result["finish_reasons"]) reasons.push_back(openai_reason(r));
  } else {
    reasons.push_back(openai_reason(result["finish_reason"]));
  }
  return reasons;
}

json usage(const json& result) {
  const int prompt = result["stats"]["prompt_tokens"].get<int>(), completion = result["stats"]["new_tokens"].get<int>();
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

json completion_response(const CompletionRequest& request, const ResponseHeader& header, const json& result,
                         const Tokenizer& tokenizer) {
  const std::vector<std::string> text = texts(result), reasons = finish_reasons(result);
  json choices = json::array();
  for (std::size_t i = 0; i < text.size(); ++i) {
    json choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", reasons[i]}};
    if (result.contains("logprobs")) {
      const json& logprobs = result["logprobs"];
      const bool several = logprobs.contains("samples");
      choice["logprobs"] = choice_logprobs(
          request, tokenizer, (several ? result["samples"][i] : result["ids"]).get<std::vector<int>>(),
          several ? logprobs["samples"][i] : logprobs["content"], logprobs["top"].get<int>());
    }
    if (is_chat(request)) {
      choice["message"] = {{"role", "assistant"}, {"content", text[i]}};
    } else {
      choice["text"] = text[i];
    }
    choices.push_back(std::move(choice));
  }
  json response = envelope(request, header, false);
  response["choices"] = std::move(choices);
  response["usage"] = usage(result);
  response["specula"] = {{"stats", result["stats"]}};
  return response;
}

json stream_chunk(const CompletionRequest& request, const ResponseHeader& header, int index, std::string_view text,
                  bool first, const std::optional<std::string>& finish_reason) {
  json choice = {{"index", index}, {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}};
  if (is_chat(request)) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!finish_reason) delta["content"] = text;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  json chunk = envelope(request, header, true);
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json usage_chunk(const CompletionRequest& request, const ResponseHeader& header, const json& result) {
  json chunk = envelope(request, header, true);
  chunk["choices"] = json::array();
  chunk["usage"] = usage(result);
  return chunk;
}

std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(const RequestError& error) {
  return {{"error",
           {{"message", error.what()},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", nullptr}}}};
}

}  // namespace specula::server
