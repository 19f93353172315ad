// defines: ChatMessage, ChatTemplate (a model's chat_template, recognised as one of the
// families this code renders), ChatOptions, load_chat_template (from a model folder's
// tokenizer_config.json), render_chat, the prompt text as @huggingface/jinja renders the
// real template, and encode_chat, its ids as a generation prompt. No Jinja engine: one renderer per family, chosen by the template's
// distinctive text; an unrecognised template is an error.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace specula {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFamily {
  kLlama3,     // Llama 3 (8B-Instruct): header turns, BOS before the first
  kLlama3Date, // Llama 3.1 / 3.2 / 3.3: a system turn with "Cutting Knowledge Date" and today's date
  kQwen25,     // Qwen2.5 ChatML with its default system prompt
  kQwen3,      // Qwen3 ChatML with <think> blocks in the assistant turns after the last query
  kLlama2,     // Llama 2 chat: [INST] ... [/INST], <<SYS>> inside the first user turn
  kMistral,    // Mistral-7B-Instruct v0.1 / v0.2: [INST] ... [/INST], user and assistant only
};

struct ChatTemplate {
  ChatFamily family = ChatFamily::kLlama3;
  std::string bos_token, eos_token;  // the text the template writes for bos_token / eos_token
  // kLlama3Date: the date the template falls back on ("26 Jul 2024"), and whether it asks
  // strftime_now for today's date first (Llama 3.2 does, 3.1 does not).
  std::string default_date;
  bool date_from_clock = false;
  std::string default_system;  // kQwen25: the system prompt when the messages have none
  bool space_after_eos = false;  // kMistral: v0.1's "eos_token + ' '"
  std::string name() const;      // "llama3", "llama3-date", "qwen2.5", "qwen3", "llama2", "mistral"
};

// The variables a template reads besides the messages (@huggingface/jinja's defaults when unset).
struct ChatOptions {
  std::optional<std::string> date_string;  // kLlama3Date: "%d %b %Y"; unset = the template's default
  std::optional<bool> enable_thinking;     // kQwen3: false adds an empty <think> block to the prompt
};

// Recognises `text` (a chat_template). `where` names its file in errors.
ChatTemplate recognise_chat_template(const std::string& text, const std::string& bos_token,
                                     const std::string& eos_token, const std::string& where);
// The chat template of a model folder: tokenizer_config.json's chat_template (a string, or the
// "default" entry of a list), else chat_template.jinja; bos_token / eos_token from the config.
ChatTemplate load_chat_template(const std::string& dir);

// The prompt text of `messages` (at least one), ending with the assistant header when
// `add_generation_prompt`. Tokenize it without adding special tokens (its text holds them):
// tokenizer.encode(render_chat(...), false). Roles the family's template refuses (or raises
// on, such as non-alternating turns in [INST] templates) are errors.
std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatOptions& options = {});

// The ids of `messages` as a generation prompt (the assistant header last), as Hugging Face's
// apply_chat_template(messages, add_generation_prompt=True, tokenize=True) gives them: the
// rendered text encoded without adding special tokens (the text holds them).
std::vector<int> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                             const std::vector<ChatMessage>& messages);

}  // namespace specula
