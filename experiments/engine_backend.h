// defines: EngineBackend, the GenerationBackend that runs requests on this process's engine
// (runtime/: one ModelStore, generate, run_requests) — what `specula run` and the Python
// module's run_experiment use — and prompt_token_ids, a Prompt's token ids for a model.
#pragma once

#include <string>
#include <vector>

#include "experiments/backend.h"
#include "experiments/config.h"
#include "runtime/model_store.h"

namespace specula {

// The token ids of `prompt` for the model in `model_dir`: its text under the model's
// tokenizer, BOS first; its messages rendered with the model's chat_template as a generation
// prompt; or its ids as given.
std::vector<int> prompt_token_ids(ModelStore& models, const std::string& model_dir, const Prompt& prompt);

class EngineBackend : public GenerationBackend {
 public:
  std::vector<int> tokenize(const std::string& model_dir, const Prompt& prompt) override;
  void validate(const GenerateOptions& options, const OptionNames& names) override;
  nlohmann::json generate(const GenerateOptions& options) override;
  nlohmann::json generate_batch(const std::vector<GenerateOptions>& requests, int batch_size,
                                const std::vector<double>& arrivals_s) override;
  std::string device_name() override;
  int threads(const GenerateOptions& options) override;

 private:
  ModelStore models_;
};

}  // namespace specula
