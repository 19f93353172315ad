#include "cli/make_checkpoint_command.h"

#include <iostream>

#include "model/checkpoint_writer.h"
#include "base/error.h"

namespace specula::cli {

MakeCheckpointCommand::MakeCheckpointCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("make-checkpoint",
                            "Write a random-weight checkpoint (Hugging Face layout: LLaMA, Mistral, Qwen2, Qwen3) of a given shape");
  cmd_->add_option("--out", out_, "Folder to create (must not hold a checkpoint already)")->required();
  cmd_->add_option("--shape", preset_, "Named shape: tinyllama-1.1b | target-16m | draft-4m | draft-1m; family test shapes llama3 | qwen2 | qwen3 | mistral; real shapes llama3.2-1b | qwen2.5-0.5b | qwen3-0.6b")
      ->capture_default_str();
  cmd_->add_option("--hidden", hidden_, "Override: hidden_size");
  cmd_->add_option("--ffn", ffn_, "Override: intermediate_size");
  cmd_->add_option("--heads", heads_, "Override: num_attention_heads");
  cmd_->add_option("--kv-heads", kv_heads_, "Override: num_key_value_heads");
  cmd_->add_option("--layers", layers_, "Override: num_hidden_layers");
  cmd_->add_option("--vocab", vocab_, "Override: vocab_size (at least the tokenizer's pieces)");
  cmd_->add_option("--dtype", dtype_, "bf16 | f16 | f32")->capture_default_str();
  cmd_->add_option("--seed", seed_, "Seed of the weights")->capture_default_str();
  cmd_->add_option("--tokenizer", tokenizer_, "tokenizer.model to copy in (default: the bundled one)");
}

int MakeCheckpointCommand::run() {
  RandomCheckpoint o;
  o.shape = preset_shape(preset_);
  for (auto [value, field] : {std::pair{hidden_, &o.shape.hidden_size}, std::pair{ffn_, &o.shape.intermediate_size},
                              std::pair{heads_, &o.shape.num_attention_heads},
                              std::pair{kv_heads_, &o.shape.num_key_value_heads},
                              std::pair{layers_, &o.shape.num_hidden_layers}, std::pair{vocab_, &o.shape.vocab_size}})
    if (value != 0) *field = value;
  const std::optional<DType> dtype = parse_dtype(dtype_);
  SPECULA_CHECK(dtype.has_value(), "--dtype '", dtype_, "' is not one of bf16, f16, f32");
  o.dtype = *dtype;
  o.seed = seed_;
  o.tokenizer_model = tokenizer_.empty() ? std::string(SPECULA_SOURCE_DIR) + "/models/target-16m/tokenizer.model"
                                         : tokenizer_;
  write_random_checkpoint(out_, o);
  std::cout << "wrote " << out_ << " (" << o.shape.num_hidden_layers << " layers, hidden " << o.shape.hidden_size
            << ", vocab " << o.shape.vocab_size << ", " << dtype_ << ")\n";
  return 0;
}

}  // namespace specula::cli
