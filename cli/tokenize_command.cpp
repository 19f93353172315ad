#include "cli/tokenize_command.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "base/error.h"
#include "text/tokenizer.h"

namespace specula::cli {

TokenizeCommand::TokenizeCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("tokenize", "Print the token ids (and pieces) of a text or a chat prompt");
  cmd_->add_option("--model", model_dir_, "Folder with tokenizer.model, or tokenizer.json (+ tokenizer_config.json)")
      ->required();
  auto* text = cmd_->add_option("--text", text_, "Text, encoded with the special tokens encode adds by default");
  auto* chat = cmd_->add_option("--chat", chat_, "A user message, rendered with the model's chat_template");
  auto* system = cmd_->add_option("--system", system_, "A system message before the --chat message");
  text->excludes(chat);
  system->needs(chat);
  cmd_->add_flag("--json", json_, "Print {\"ids\": [...], \"pieces\": [...]}");
}

int TokenizeCommand::run() {
  SPECULA_CHECK(cmd_->count("--text") + cmd_->count("--chat") == 1, "tokenize: give --text or --chat");
  const Tokenizer tok = Tokenizer::load(model_dir_);
  std::vector<int> ids;
  if (cmd_->count("--text")) {
    ids = tok.encode(text_, true);
  } else {
    std::vector<ChatMessage> messages;
    if (cmd_->count("--system")) messages.push_back({"system", system_});
    messages.push_back({"user", chat_});
    ids = encode_chat(tok, load_chat_template(model_dir_), messages);
  }
  if (json_) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int id : ids) pieces.push_back(tok.piece(id));
    std::cout << nlohmann::json{{"ids", ids}, {"pieces", pieces}}.dump(-1, ' ', false,
                                                                        nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    for (int id : ids) std::cout << id << "\t" << tok.piece(id) << "\n";
  }
  return 0;
}

}  // namespace specula::cli
