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

// A result's per-token entry {"token", "logprob", "top": [{"token", "logprob"}]}.
TokenLogprob from_entry(const json& entry) {
  TokenLogprob t;
  t.token = entry["token"].get<int>();
  t.logprob = entry["logprob"].get<double>();
  for (const json& alt : entry["top"]) t.top.emplace_back(alt["token"].get<int>(), alt["logprob"].get<double>());
  return t;
}

}  // namespace

LogprobToken logprob_token(const Tokenizer& tokenizer, std::span<const int> previous, const TokenLogprob& logprob,
                           std::size_t offset) {
  LogprobToken t{tokenizer.decode_piece(previous, logprob.token), offset, logprob.logprob, {}};
  for (const auto& [token, value] : logprob.top) t.top.emplace_back(tokenizer.decode_piece(previous, token), value);
  return t;
}

bool logprobs_hold(const LogprobToken& token, std::size_t kept, bool cut) {
  return !cut || token.offset < kept || token.offset + token.text.size() <= kept;
}

json choice_logprobs(const CompletionRequest& request, std::span<const LogprobToken> tokens, int top) {
  if (is_chat(request)) {
    json content = json::array();
    for (const LogprobToken& t : tokens) {
      json alternatives = json::array();
      for (const auto& [text, value] : t.top)
        alternatives.push_back({{"token", text}, {"logprob", value}, {"bytes", bytes_of(text)}});
      content.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)},
                         {"top_logprobs", std::move(alternatives)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json texts = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  for (const LogprobToken& t : tokens) {
    texts.push_back(t.text);
    logprobs.push_back(t.logprob);
    offsets.push_back(t.offset);
    json alternatives = json::object();
    for (const auto& [text, value] : t.top) alternatives[text] = value;
    tops.push_back(std::move(alternatives));
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", top > 0 ? std::move(tops) : json(nullptr)},
          {"text_offset", std::move(offsets)}};
}

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
      const std::vector<int> ids = (several ? result["samples"][i] : result["ids"]).get<std::vector<int>>();
      const json& entries = several ? logprobs["samples"][i] : logprobs["content"];
      const bool cut = (several ? result["finish_reasons"][i] : result["finish_reason"]) == "stop_string";
      std::vector<LogprobToken> tokens;
      std::size_t offset = 0;
      for (std::size_t k = 0; k < std::min(ids.size(), entries.size()); ++k) {
        LogprobToken t = logprob_token(tokenizer, std::span(ids).first(k), from_entry(entries[k]), offset);
        offset += t.text.size();
        if (logprobs_hold(t, text[i].size(), cut)) tokens.push_back(std::move(t));
      }
      choice["logprobs"] = choice_logprobs(request, tokens, logprobs["top"].get<int>());
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
                  bool first, const std::optional<std::string>& finish_reason, json logprobs) {
  json choice = {{"index", index}, {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}};
  if (is_chat(request)) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!finish_reason) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
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
