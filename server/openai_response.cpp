#include "server/openai_response.h"

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

json completion_response(const CompletionRequest& request, const ResponseHeader& header, const json& result) {
  const std::vector<std::string> text = texts(result), reasons = finish_reasons(result);
  json choices = json::array();
  for (std::size_t i = 0; i < text.size(); ++i) {
    json choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", reasons[i]}};
    if (is_chat(request)) {
      choice["message"] = {{"role", "assistant"}, {"content", text[i]}};
    } else {
      choice["text"] = text[i];
    }
    choices.push_back(std::move(choice));
  }
  return {{"id", header.id},
          {"object", is_chat(request) ? "chat.completion" : "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", std::move(choices)},
          {"usage", usage(result)},
          {"specula", {{"stats", result["stats"]}}}};
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
  return {{"id", header.id},
          {"object", is_chat(request) ? "chat.completion.chunk" : "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", json::array({std::move(choice)})}};
}

json usage_chunk(const CompletionRequest& request, const ResponseHeader& header, const json& result) {
  return {{"id", header.id},
          {"object", is_chat(request) ? "chat.completion.chunk" : "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", json::array()},
          {"usage", usage(result)}};
}

json error_body(const RequestError& error) {
  return {{"error",
           {{"message", error.what()},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", nullptr}}}};
}

}  // namespace specula::server
