#include "cli/generate_command.h"

#include <iostream>
#include <sstream>

#include "engine/error.h"
#include "runtime/generate.h"

namespace specula::cli {
namespace {

std::vector<int> parse_int_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      std::size_t used = 0;
      out.push_back(std::stoi(item, &used));
      SPECULA_CHECK(used == item.size(), flag, ": '", item, "' is not an integer");
    } catch (const std::logic_error&) {
      throw SpeculaError(detail::concat(flag, ": '", item, "' is not an integer"));
    }
  }
  SPECULA_CHECK(!out.empty(), flag, ": expected a comma-separated list of integers");
  return out;
}

}  // namespace

GenerateCommand::GenerateCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("generate", "Generate a continuation of one prompt");
  cmd_->add_option("--model", options_.model_dir, "Target model folder (Hugging Face layout)")->required();
  auto* prompt = cmd_->add_option("--prompt", prompt_, "Prompt text (tokenized with BOS)");
  auto* ids = cmd_->add_option("--prompt-ids", prompt_ids_, "Prompt token ids, comma-separated, used as given");
  prompt->excludes(ids);
  cmd_->add_option("--max-new-tokens", options_.max_new_tokens, "Tokens to generate")->default_val(64);
  cmd_->add_option("--kv-block-size", options_.kv_block_size, "KV cache block size in token slots")->default_val(16);
  cmd_->add_flag("--json", json_, "Print one JSON object with ids, text and stats");
}

int GenerateCommand::run() {
  SPECULA_CHECK(!prompt_.empty() || !prompt_ids_.empty(), "one of --prompt or --prompt-ids is required");
  ModelStore models;
  Model& target = models.get(options_.model_dir);
  options_.prompt_ids = prompt_ids_.empty() ? target.tokenizer().encode(prompt_, true)
                                            : parse_int_list(prompt_ids_, "--prompt-ids");

  std::vector<int> streamed;
  TokenSink sink;
  if (!json_) {
    sink = [&](int, int token) {
      std::cout << target.tokenizer().decode_piece(streamed, token) << std::flush;
      streamed.push_back(token);
    };
  }
  nlohmann::json result = generate(models, options_, sink);
  if (json_) {
    std::cout << result.dump() << std::endl;
  } else {
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace specula::cli
