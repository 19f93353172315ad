#include "text/chat_template.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "text/tokenizer.h"

namespace specula {
namespace {

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// JavaScript's String.prototype.trim whitespace (WhiteSpace and LineTerminator): @huggingface/jinja
// implements trim, strip, lstrip and rstrip with it, ignoring strip's argument.
std::size_t js_space_at(const std::string& s, std::size_t i) {
  static const char* const kSpaces[] = {"\t", "\n", "\v", "\f", "\r", " ", "\u00A0", "\u1680", "\u2000", "\u2001",
                                        "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009",
                                        "\u200A", "\u2028", "\u2029", "\u202F", "\u205F", "\u3000", "\uFEFF"};
  for (const char* sp : kSpaces) {
    const std::size_t n = std::char_traits<char>::length(sp);
    if (s.compare(i, n, sp) == 0) return n;
  }
  return 0;
}

std::string trim_start(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size())
    if (const std::size_t n = js_space_at(s, i)) i += n; else break;
  return s.substr(i);
}

std::string trim_end(const std::string& s) {
  std::size_t e = s.size();
  while (e > 0) {
    std::size_t p = e - 1;  // start of the last character
    while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
    if (js_space_at(s, p) != e - p) break;
    e = p;
  }
  return s.substr(0, e);
}

std::string trim(const std::string& s) { return trim_end(trim_start(s)); }

// Python's s.split(sep)[0] and [-1].
std::string before_first(const std::string& s, const std::string& sep) { return s.substr(0, s.find(sep)); }
std::string after_last(const std::string& s, const std::string& sep) {
  const std::size_t p = s.rfind(sep);
  return p == std::string::npos ? s : s.substr(p + sep.size());
}

// What strftime_now("%d %b %Y") gives: today, local time, English month.
std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char day[3];
  std::snprintf(day, sizeof day, "%02d", local.tm_mday);
  return std::string(day) + " " + kMonths[local.tm_mon] + " " + std::to_string(local.tm_year + 1900);
}

[[noreturn]] void raise(const ChatTemplate& t, const std::string& message) {
  throw SpeculaError("chat template " + t.name() + ": " + message);
}

const std::string kHeaderEnd = "<|end_header_id|>\n\n";

std::string render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen) {
  std::string out;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (i == 0) out += t.bos_token;
    out += "<|start_header_id|>" + m[i].role + kHeaderEnd + trim(m[i].content) + "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant" + kHeaderEnd;
  return out;
}

std::string render_llama3_date(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen,
                               const ChatOptions& o) {
  const std::string date = o.date_string ? *o.date_string : t.date_from_clock ? today() : t.default_date;
  std::size_t first = 0;
  std::string system;
  if (m[0].role == "system") {
    system = trim(m[0].content);
    first = 1;
  }
  std::string out = t.bos_token + "<|start_header_id|>system" + kHeaderEnd +
                    "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" + system + "<|eot_id|>";
  for (std::size_t i = first; i < m.size(); ++i)
    out += "<|start_header_id|>" + m[i].role + kHeaderEnd + trim(m[i].content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant" + kHeaderEnd;
  return out;
}

std::string chatml_turn(const ChatMessage& m) { return "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n"; }

std::string render_qwen25(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen) {
  std::string out = m[0].role == "system" ? chatml_turn(m[0]) : chatml_turn({"system", t.default_system});
  for (std::size_t i = m[0].role == "system" ? 1 : 0; i < m.size(); ++i) out += chatml_turn(m[i]);
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_qwen3(const std::vector<ChatMessage>& m, bool gen, const ChatOptions& o) {
  std::string out;
  if (m[0].role == "system") out += chatml_turn(m[0]);
  // The last user turn that is not a tool response: assistant turns after it show their thinking.
  std::size_t last_query = m.size() - 1;
  for (std::size_t k = m.size(); k-- > 0;) {
    const std::string& c = m[k].content;
    if (m[k].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m[i].role == "user" || (m[i].role == "system" && i > 0)) {
      out += chatml_turn(m[i]);
    } else if (m[i].role == "assistant") {
      std::string content = m[i].content, reasoning;
      if (has(content, "</think>")) {
        content = trim_start(after_last(m[i].content, "</think>"));
        reasoning = trim_start(after_last(trim_end(before_first(m[i].content, "</think>")), "<think>"));
      }
      if (i > last_query && (i + 1 == m.size() || !reasoning.empty()))
        out += "<|im_start|>assistant\n<think>\n" + trim(reasoning) + "\n</think>\n\n" + trim_start(content);
      else
        out += "<|im_start|>assistant\n" + content;
      out += "<|im_end|>\n";
    }
  }
  if (gen) {
    out += "<|im_start|>assistant\n";
    if (o.enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

void check_alternating(const ChatTemplate& t, const std::vector<ChatMessage>& m, std::size_t first) {
  for (std::size_t i = first; i < m.size(); ++i)
    if ((m[i].role == "user") != ((i - first) % 2 == 0))
      raise(t, "Conversation roles must alternate user/assistant/user/assistant/...");
}

std::string render_llama2(const ChatTemplate& t, const std::vector<ChatMessage>& m) {
  const bool system = m[0].role == "system";
  const std::size_t first = system ? 1 : 0;
  check_alternating(t, m, first);
  std::string out;
  for (std::size_t i = first; i < m.size(); ++i) {
    std::string content = m[i].content;
    if (i == first && system) content = "<<SYS>>\n" + m[0].content + "\n<</SYS>>\n\n" + content;
    if (m[i].role == "user") out += t.bos_token + "[INST] " + trim(content) + " [/INST]";
    if (m[i].role == "assistant") out += " " + trim(content) + " " + t.eos_token;
  }
  return out;
}

std::string render_mistral(const ChatTemplate& t, const std::vector<ChatMessage>& m) {
  std::string out = t.bos_token;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if ((m[i].role == "user") != (i % 2 == 0)) raise(t, "Conversation roles must alternate user/assistant/user/assistant/...");
    if (m[i].role == "user")
      out += "[INST] " + m[i].content + " [/INST]";
    else if (m[i].role == "assistant")
      out += m[i].content + t.eos_token + (t.space_after_eos ? " " : "");
    else
      raise(t, "Only user and assistant roles are supported!");
  }
  return out;
}

}  // namespace

std::string ChatTemplate::name() const {
  switch (family) {
    case ChatFamily::kLlama3: return "llama3";
    case ChatFamily::kLlama3Date: return "llama3-date";
    case ChatFamily::kQwen25: return "qwen2.5";
    case ChatFamily::kQwen3: return "qwen3";
    case ChatFamily::kLlama2: return "llama2";
    case ChatFamily::kMistral: return "mistral";
  }
  return "?";
}

ChatTemplate recognise_chat_template(const std::string& text, const std::string& bos_token,
                                     const std::string& eos_token, const std::string& where) {
  ChatTemplate t;
  t.bos_token = bos_token;
  t.eos_token = eos_token;
  if (has(text, "<|start_header_id|>") && has(text, "Cutting Knowledge Date: December 2023") &&
      has(text, "Today Date: ")) {
    t.family = ChatFamily::kLlama3Date;
    const std::string set = "set date_string = \"";
    const std::size_t at = text.find(set), end = at == std::string::npos ? at : text.find('"', at + set.size());
    SPECULA_CHECK(end != std::string::npos, where, ": chat_template looks like Llama 3.x's but sets no default date_string");
    t.default_date = text.substr(at + set.size(), end - at - set.size());
    t.date_from_clock = has(text, "strftime_now");
  } else if (has(text, "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'") &&
             has(text, "set content = bos_token + content")) {
    t.family = ChatFamily::kLlama3;
  } else if (has(text, "<|im_start|>") && has(text, "</think>") && has(text, "reasoning_content") &&
             has(text, "last_query_index")) {
    t.family = ChatFamily::kQwen3;
  } else if (has(text, "<|im_start|>") && has(text, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")) {
    t.family = ChatFamily::kQwen25;
    t.default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  } else if (has(text, "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content']") &&
             has(text, "bos_token + '[INST] ' + content.strip() + ' [/INST]'") &&
             has(text, "' '  + content.strip() + ' ' + eos_token")) {
    t.family = ChatFamily::kLlama2;
  } else if (text.starts_with("{{ bos_token }}") && has(text, "'[INST] ' + message['content'] + ' [/INST]'") &&
             has(text, "message['content'] + eos_token") && has(text, "Only user and assistant roles are supported!")) {
    t.family = ChatFamily::kMistral;
    t.space_after_eos = has(text, "eos_token + ' '");
  } else {
    SPECULA_CHECK(false, where, ": chat_template is not one this code renders (Llama 3.x, Qwen2.5/Qwen3 ChatML, ",
                  "Llama 2 / Mistral [INST]); it begins '", text.substr(0, 60), "'");
  }
  return t;
}

ChatTemplate load_chat_template(const std::string& dir) {
  const std::filesystem::path d(dir);
  const std::string config_path = (d / "tokenizer_config.json").string();
  std::ifstream in(config_path);
  SPECULA_CHECK(in, config_path, ": cannot open (the chat template and its special tokens live there)");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    SPECULA_CHECK(false, config_path, ": not valid JSON: ", e.what());
  }
  const auto token = [&](const char* name) -> std::string {
    if (!config.contains(name)) return "";
    const auto& v = config.at(name);
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
    return "";
  };
  std::string text, where = config_path;
  if (config.contains("chat_template") && config.at("chat_template").is_string()) {
    text = config.at("chat_template").get<std::string>();
  } else if (config.contains("chat_template") && config.at("chat_template").is_array()) {
    for (const auto& entry : config.at("chat_template"))
      if (entry.value("name", "") == "default" && entry.contains("template") && entry.at("template").is_string())
        text = entry.at("template").get<std::string>();
    SPECULA_CHECK(!text.empty(), config_path, ": chat_template lists no \"default\" template");
  } else {
    SPECULA_CHECK(!config.contains("chat_template") || config.at("chat_template").is_null(), config_path,
                  ": chat_template must be a string or a list of {name, template}, not ",
                  config.at("chat_template").dump());
    where = (d / "chat_template.jinja").string();
    std::ifstream jinja(where);
    SPECULA_CHECK(jinja, config_path, ": no chat_template, and no ", where);
    std::ostringstream all;
    all << jinja.rdbuf();
    text = all.str();
  }
  return recognise_chat_template(text, token("bos_token"), token("eos_token"), where);
}

std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatOptions& options) {
  if (messages.empty()) raise(tmpl, "no messages to render");
  for (const ChatMessage& m : messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      raise(tmpl, "role '" + m.role + "' is not supported (system, user, assistant)");
  switch (tmpl.family) {
    case ChatFamily::kLlama3: return render_llama3(tmpl, messages, add_generation_prompt);
    case ChatFamily::kLlama3Date: return render_llama3_date(tmpl, messages, add_generation_prompt, options);
    case ChatFamily::kQwen25: return render_qwen25(tmpl, messages, add_generation_prompt);
    case ChatFamily::kQwen3: return render_qwen3(messages, add_generation_prompt, options);
    case ChatFamily::kLlama2: return render_llama2(tmpl, messages);
    case ChatFamily::kMistral: return render_mistral(tmpl, messages);
  }
  return "";
}

std::vector<int> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                             const std::vector<ChatMessage>& messages) {
  return tokenizer.encode(render_chat(tmpl, messages, true), false);
}

}  // namespace specula
