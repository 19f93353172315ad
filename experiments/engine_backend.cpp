#include "experiments/engine_backend.h"

#include "runtime/batch_run.h"
#include "runtime/generate.h"
#include "text/chat_template.h"

namespace specula {

std::vector<int> prompt_token_ids(ModelStore& models, const std::string& model_dir, const Prompt& prompt) {
  if (!prompt.ids.empty()) return prompt.ids;
  const Tokenizer& tokenizer = models.model(model_dir).tokenizer();
  if (prompt.messages.empty()) return tokenizer.encode(prompt.text, true);
  return encode_chat(tokenizer, load_chat_template(model_dir), prompt.messages);
}

std::vector<int> EngineBackend::tokenize(const std::string& model_dir, const Prompt& prompt) {
  return prompt_token_ids(models_, model_dir, prompt);
}

void EngineBackend::validate(const GenerateOptions& options, const OptionNames& names) {
  validate_generate_options(models_, options, names);
}

nlohmann::json EngineBackend::generate(const GenerateOptions& options) { return specula::generate(models_, options); }

nlohmann::json EngineBackend::generate_batch(const std::vector<GenerateOptions>& requests, int batch_size,
                                             const std::vector<double>& arrivals_s) {
  const BatchRun run = run_requests(models_, requests, batch_size, arrivals_s);
  return {{"results", run.results}, {"summary", run.summary}};
}

std::string EngineBackend::device_name() { return accelerator_name(); }

int EngineBackend::threads(const GenerateOptions& options) { return request_threads(options); }

}  // namespace specula
