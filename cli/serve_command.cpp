#include "cli/serve_command.h"

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "experiments/prompt_options.h"
#include "runtime/scheduler_limits.h"

namespace specula::cli {
namespace {

// --option KEY=VALUE pairs as config keys; a VALUE that is JSON is taken as that JSON
// (4, 0.7, true, ["a", "b"]), any other as a string.
nlohmann::json option_keys(const std::vector<std::string>& pairs) {
  nlohmann::json keys = nlohmann::json::object();
  for (const std::string& pair : pairs) {
    const std::size_t equals = pair.find('=');
    SPECULA_CHECK(equals != std::string::npos && equals > 0, "--option must be KEY=VALUE, got '", pair, "'");
    const std::string key = pair.substr(0, equals), text = pair.substr(equals + 1);
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    keys[key] = value.is_discarded() ? nlohmann::json(text) : value;
  }
  return keys;
}

}  // namespace

ServeCommand::ServeCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API (/v1/completions, "
                                     "/v1/chat/completions, /v1/models, /health, /metrics). A beam-search request "
                                     "(sampling.strategy beam) waits for the running requests to finish, then runs "
                                     "alone to its end; the requests after it wait for it");
  cmd_->add_option("--model", base_.model_dir, "Target model folder (Hugging Face layout)")->required();
  cmd_->add_option("--model-name", serve_.model_name, "The model id requests name (default: the folder's name)");
  cmd_->add_option("--host", serve_.host, "Address to listen on")->capture_default_str();
  cmd_->add_option("--port", serve_.port, "Port to listen on (0: a free one, printed)")->capture_default_str();
  cmd_->add_option("--api-key", serve_.api_key, "Require 'Authorization: Bearer KEY' on /v1/ routes");
  cmd_->add_option("--max-queue", serve_.max_queue, "Requests in the server at most (waiting or decoding); more get 429")
      ->capture_default_str();
  cmd_->add_option("--max-batch", max_batch_, "Sequences decoded side by side in one step")->capture_default_str();
  cmd_->add_option("--kv-pool-blocks", base_.kv_pool_blocks,
                   "Target KV pool in blocks (default 0: --max-batch sequences of the model's whole context)")
      ->default_val(0);
  cmd_->add_option("--kv-block-size", base_.kv_block_size, "KV cache block size in token slots")->default_val(16);
  cmd_->add_option("--threads", base_.threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd_->add_option("--option", options_,
                   "A default request setting as a config key, KEY=VALUE (repeatable), e.g. draft.path=models/draft-1m, "
                   "draft.gamma=4, run.max_new_tokens=128; a request's own fields and \"specula\" keys override it")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd_->add_option("--drain-seconds", serve_.drain_seconds,
                   "On SIGTERM / SIGINT: seconds the requests in may take to finish before they are cancelled")
      ->capture_default_str();
}

int ServeCommand::run() {
  server::block_stop_signals();  // before any thread starts: serve() waits for them
  SPECULA_CHECK(max_batch_ >= 1, "--max-batch must be >= 1, got ", max_batch_);
  SPECULA_CHECK(serve_.max_queue >= 1 && serve_.max_queue <= server::kMaxQueue, "--max-queue must be in [1, ",
                server::kMaxQueue, "], got ", serve_.max_queue);
  SPECULA_CHECK(serve_.port >= 0 && serve_.port <= 65535, "--port must be in [0, 65535], got ", serve_.port);
  SPECULA_CHECK(serve_.drain_seconds >= 0, "--drain-seconds must be >= 0, got ", serve_.drain_seconds);
  const std::filesystem::path model = std::filesystem::absolute(base_.model_dir).lexically_normal();
  base_.model_dir = model.string();
  if (serve_.model_name.empty()) serve_.model_name = model.filename().string();

  const nlohmann::json keys = option_keys(options_);
  try {
    apply_prompt_options(keys, base_, std::filesystem::current_path(), "with its own flag of specula serve");
  } catch (const SpeculaError& e) {
    const std::string message = e.what();
    throw SpeculaError(message.starts_with("options.") ? "--option " + message.substr(8) : "--option" + message.substr(7));
  }
  // Every setting is an --option KEY but for the few serve has a flag of its own for.
  OptionNames names = cli_option_names();
  names.name = [flag = names.name](std::string_view key) {
    return key == "run.threads" || key == "run.kv_pool_blocks" || key == "run.kv_block_size" ? flag(key)
                                                                                             : "--option " + std::string(key);
  };
  names.given = [keys](std::string_view key) { return keys.contains(std::string(key)); };
  validate_options(base_, names);

  SchedulerLimits limits;
  limits.max_sequences = max_batch_;
  limits.kv_blocks = base_.kv_pool_blocks;
  server::EngineLoop engine(base_, limits, serve_.max_queue);
  return server::serve(engine, serve_, std::cout);
}

}  // namespace specula::cli
