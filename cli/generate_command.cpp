#include "cli/generate_command.h"

#include "cli/batch_generate.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "base/enum_names.h"
#include "base/error.h"
#include "text/chat_template.h"
#include "text/stop_strings.h"
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

// --logit-bias ID:VALUE,ID:VALUE,...
std::vector<std::pair<int, float>> parse_logit_bias(const std::string& text) {
  std::vector<std::pair<int, float>> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const std::size_t colon = item.find(':');
    try {
      SPECULA_CHECK(colon != std::string::npos, "--logit-bias: '", item, "' is not ID:VALUE");
      std::size_t used_id = 0, used_value = 0;
      const std::string id = item.substr(0, colon), value = item.substr(colon + 1);
      const int token = std::stoi(id, &used_id);
      const float bias = std::stof(value, &used_value);
      SPECULA_CHECK(used_id == id.size() && used_value == value.size(), "--logit-bias: '", item, "' is not ID:VALUE");
      out.emplace_back(token, bias);
    } catch (const std::logic_error&) {
      throw SpeculaError(detail::concat("--logit-bias: '", item, "' is not ID:VALUE"));
    }
  }
  SPECULA_CHECK(!out.empty(), "--logit-bias: expected ID:VALUE,ID:VALUE,...");
  return out;
}

// --sequoia P,P,...;P,P,...: rows of acceptance probabilities by sibling rank, one per depth.
std::vector<std::vector<double>> parse_rank_acceptance(const std::string& text) {
  std::vector<std::vector<double>> out;
  std::stringstream rows(text);
  for (std::string row; std::getline(rows, row, ';');) {
    std::vector<double>& values = out.emplace_back();
    std::stringstream in(row);
    for (std::string item; std::getline(in, item, ',');) {
      try {
        std::size_t used = 0;
        values.push_back(std::stod(item, &used));
        SPECULA_CHECK(used == item.size(), "--sequoia: '", item, "' is not a number");
      } catch (const std::logic_error&) {
        throw SpeculaError(detail::concat("--sequoia: '", item, "' is not a number"));
      }
    }
  }
  SPECULA_CHECK(!out.empty(), "--sequoia: expected rows P,P,...;P,P,... (one per depth, by sibling rank)");
  return out;
}

// "64 tokens · prefill 1200 tok/s · decode 310.5 tok/s · 0.26 s · τ 2.31 · acceptance 0.66".
std::string stats_line(const nlohmann::json& stats) {
  char out[256];
  int n = std::snprintf(out, sizeof out, "%d tokens · prefill %.0f tok/s · decode %.1f tok/s · %.2f s",
                        stats.value("new_tokens", 0), stats.value("prefill_tokens_per_s", 0.0),
                        stats.value("decode_tokens_per_s", 0.0), stats.value("time_s", 0.0));
  if (stats.contains("mean_accepted_tokens") && n > 0 && n < static_cast<int>(sizeof out)) {
    std::snprintf(out + n, sizeof out - n, " · τ %.2f · acceptance %.3f", stats.value("mean_accepted_tokens", 0.0),
                  stats.value("acceptance_rate", 0.0));
  }
  return out;
}

}  // namespace

GenerateCommand::GenerateCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("generate", "Generate a continuation of one prompt, or of every prompt of a file in batches");
  cmd_->add_option("--model", options_.model_dir, "Target model folder (Hugging Face layout)")->required();
  cmd_->add_option("--weights", weights_, weights_choices() + ": format the target's matrices are read in")
      ->capture_default_str();
  auto* prompt = cmd_->add_option("--prompt", prompt_, "Prompt text (tokenized with BOS)");
  auto* ids = cmd_->add_option("--prompt-ids", prompt_ids_, "Prompt token ids, comma-separated, used as given");
  auto* chat = cmd_->add_option("--chat", chat_, "A user message, rendered with the model's chat_template");
  auto* system = cmd_->add_option("--system", system_, "A system message before the --chat message");
  prompt->excludes(ids)->excludes(chat);
  ids->excludes(chat);
  system->needs(chat);
  auto* file = cmd_->add_option("--prompts-file", prompts_file_,
                                "JSON lines {\"id\", \"prompt\" | \"messages\" | \"prompt_ids\"}: every prompt through the batch scheduler");
  file->excludes(prompt)->excludes(ids)->excludes(chat);
  cmd_->add_option("--batch-size", batch_size_, "Sequences decoded side by side with --prompts-file")
      ->default_val(1)
      ->needs(file);
  cmd_->add_option("--max-new-tokens", options_.max_new_tokens, "Tokens to generate")->default_val(64);
  cmd_->add_option("--kv-block-size", options_.kv_block_size, "KV cache block size in token slots")->default_val(16);
  cmd_->add_option("--kv-pool-blocks", options_.kv_pool_blocks,
                   "Target KV pool in blocks, the draft's following it (default 0: sized for the run; "
                   "smaller pools preempt)")
      ->default_val(0);
  cmd_->add_flag("--json", json_, "Print one JSON object with ids, text and stats");
  cmd_->add_option("--threads", options_.threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd_->add_option("--backend", backend_, "cpu | cuda")->capture_default_str();
  cmd_->add_option("--kv-dtype", kv_dtype_, "f32 | bf16 | int8: KV cache elements (default: cpu f32, cuda bf16)");

  SamplingOptions& s = options_.sampling;
  cmd_->add_option("--sampler", sampler_, "greedy | sample | beam")->capture_default_str();
  cmd_->add_option("--temperature", s.temperature, "Sampling temperature (0 = greedy)")->default_val(1.0f);
  cmd_->add_option("--top-k", s.top_k, "Keep the k most probable tokens (0 = off)")->default_val(0);
  cmd_->add_option("--top-p", s.top_p, "Keep the smallest set of mass >= p (1 = off)")->default_val(1.0f);
  cmd_->add_option("--min-p", s.min_p, "Drop tokens below min-p x the top probability (0 = off)")->default_val(0.0f);
  cmd_->add_option("--beam-width", s.beam_width, "Beam width")->default_val(4);
  cmd_->add_option("--length-penalty", s.length_penalty, "Beam score = log-prob / length^alpha")->default_val(1.0f);
  LogitControls& c = options_.controls;
  cmd_->add_option("--repetition-penalty", c.repetition_penalty,
                   "Hugging Face's: logits of tokens in prompt + output divided (positive) or multiplied (negative) by it (1 = off)")
      ->default_val(1.0f);
  cmd_->add_option("--frequency-penalty", c.frequency_penalty, "OpenAI's: minus this x each token's count in the output (0 = off)")
      ->default_val(0.0f);
  cmd_->add_option("--presence-penalty", c.presence_penalty, "OpenAI's: minus this for each token present in the output (0 = off)")
      ->default_val(0.0f);
  cmd_->add_option("--no-repeat-ngram-size", c.no_repeat_ngram_size, "Never repeat an n-gram of this size (0 = off)")
      ->default_val(0);
  cmd_->add_option("--logit-bias", logit_bias_, "Added to tokens' logits: ID:VALUE,ID:VALUE,...");
  cmd_->add_option("--banned-tokens", banned_tokens_, "Token ids never generated, comma-separated");
  cmd_->add_option("--min-new-tokens", c.min_new_tokens, "No end-of-sequence token before this many new tokens")
      ->default_val(0);
  cmd_->add_option("--stop", options_.stop_strings,
                   "A stop string (repeatable): a sample ends once its text holds one, its text cut before it")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd_->add_option("--seed", options_.seed, "Seed of the per-sample random streams")
      ->default_val(0)
      ->check(CLI::Validator(  // unsigned: CLI11 alone would wrap -1 to 2^64 - 1
          [](std::string& v) { return v.starts_with('-') ? "must be >= 0, got " + v : std::string(); }, "SEED"));
  cmd_->add_option("--num-samples", options_.num_samples, "Independent continuations (beam: n-best)")->default_val(1);

  DraftOptions& d = options_.draft;
  cmd_->add_option("--draft", d.model_dir, "Draft model or draft head folder (alone: --draft-method model)");
  cmd_->add_option("--draft-method", draft_method_,
                   "model | ngram | eagle3 | eagle | medusa (model when --draft alone is given)");
  cmd_->add_option("--draft-weights", draft_weights_,
                   weights_choices() + ": format the draft's matrices are read in")
      ->capture_default_str();
  cmd_->add_option("--gamma", d.gamma, "Drafted tokens per step (chain, n-gram)")->default_val(4);
  cmd_->add_option("--tree", tree_, "Static tree branching, e.g. 3,2,1,1");
  cmd_->add_option("--tree-budget", d.tree_budget, "Dynamic tree (with --sequoia: a Sequoia tree) with this many nodes")->default_val(0);
  cmd_->add_option("--sequoia", sequoia_,
                   "The static tree of --tree-budget nodes best for these acceptance probabilities: "
                   "P,P,...;P,P,... one row per depth, by sibling rank");
  cmd_->add_option("--siblings", d.siblings,
                   "Other candidates for a draft-model chain's first token, fixed length (the load policy chooses its own)")
      ->default_val(0);
  cmd_->add_option("--ngram-min", d.ngram_min, "Shortest n-gram matched")->default_val(1);
  cmd_->add_option("--ngram-max", d.ngram_max, "Longest n-gram matched")->default_val(3);
  cmd_->add_flag("--adaptive", d.adaptive, "Adapt the chain length to acceptance");
  cmd_->add_option("--gamma-policy", gamma_policy_,
                   "fixed | threshold: --stop-below and --draft-max-batch | load: chain length per step from the "
                   "batch's measured costs and acceptance (0..--gamma)")
      ->capture_default_str();
  cmd_->add_option("--stop-below", options_.length_threshold.stop_below,
                   "threshold policy: a draft model's chain ends where its draft probability falls below this")
      ->default_val(0);
  cmd_->add_option("--draft-max-batch", options_.length_threshold.max_batch,
                   "threshold policy: no drafting in a step of more sequences than this (0: no cut-off)")
      ->default_val(0);
  cmd_->add_option("--verify-rule", verify_rule_,
                   "token | block | traversal: how sampled drafts are verified (block: chains; traversal: any tree, "
                   "leaf to root)")
      ->capture_default_str();
  cmd_->add_option("--logprobs", logprobs_,
                   "With --json: each emitted token's log-probability and this many alternatives (0-20)");
  cmd_->add_option("--logprobs-source", logprobs_source_,
                   "raw (the target's softmax) | processed (the sampler's distribution) for --logprobs")
      ->capture_default_str();
}

int GenerateCommand::run() {
  SPECULA_CHECK(cmd_->count("--prompt") + cmd_->count("--prompt-ids") + cmd_->count("--chat") +
                        cmd_->count("--prompts-file") ==
                    1,
                "one of --prompt, --prompt-ids, --chat or --prompts-file is required");
  // Option strings become enums here, once.
  DraftOptions& d = options_.draft;
  const auto strategy = parse_enum<Strategy>(sampler_);
  SPECULA_CHECK(strategy, "--sampler must be ", enum_choices<Strategy>(), ", got '", sampler_, "'");
  options_.sampling.strategy = *strategy;
  const auto backend = parse_enum<BackendKind>(backend_);
  SPECULA_CHECK(backend, "--backend must be ", enum_choices<BackendKind>(), ", got '", backend_, "'");
  options_.backend = *backend;
  if (cmd_->count("--kv-dtype") > 0) {
    options_.kv_dtype = parse_enum<KvDType>(kv_dtype_);
    SPECULA_CHECK(options_.kv_dtype, "--kv-dtype must be ", enum_choices<KvDType>(), ", got '", kv_dtype_, "'");
  }
  const auto policy = parse_enum<GammaPolicy>(gamma_policy_);
  SPECULA_CHECK(policy, "--gamma-policy must be ", enum_choices<GammaPolicy>(), ", got '", gamma_policy_, "'");
  options_.gamma_policy = *policy;
  const auto rule = parse_enum<VerifyRule>(verify_rule_);
  SPECULA_CHECK(rule, "--verify-rule must be ", enum_choices<VerifyRule>(), ", got '", verify_rule_, "'");
  options_.verify_rule = *rule;
  if (cmd_->count("--logprobs") > 0) {
    SPECULA_CHECK(json_, "--logprobs needs --json (the text output has no place for them)");
    options_.logprobs = logprobs_;
  }
  const auto source = parse_enum<LogprobSource>(logprobs_source_);
  SPECULA_CHECK(source, "--logprobs-source must be ", enum_choices<LogprobSource>(), ", got '", logprobs_source_, "'");
  options_.logprobs_source = *source;
  SPECULA_CHECK(parse_weights(weights_, options_.weights), "--weights must be ", weights_choices(), ", got '", weights_,
                "'");
  SPECULA_CHECK(parse_weights(draft_weights_, d.weights), "--draft-weights must be ", weights_choices(), ", got '",
                draft_weights_, "'");
  if (!draft_method_.empty()) {
    const auto method = parse_enum<DraftMethod>(draft_method_);
    SPECULA_CHECK(method && *method != DraftMethod::kNone,
                  "--draft-method must be model, ngram, eagle3, eagle or medusa, got '", draft_method_, "'");
    d.method = *method;
    SPECULA_CHECK(d.method == DraftMethod::kModel || drafts_with_eagle_head(d.method) ||
                      d.method == DraftMethod::kMedusa || d.model_dir.empty(),
                  "--draft ", d.model_dir, " is a draft model or head, but --draft-method is ", draft_method_);
  } else {
    d.method = d.model_dir.empty() ? DraftMethod::kNone : DraftMethod::kModel;
  }
  if (!tree_.empty()) d.tree = parse_int_list(tree_, "--tree");
  if (!sequoia_.empty()) d.sequoia = parse_rank_acceptance(sequoia_);
  if (!banned_tokens_.empty()) options_.controls.banned_tokens = parse_int_list(banned_tokens_, "--banned-tokens");
  if (!logit_bias_.empty()) options_.controls.logit_bias = parse_logit_bias(logit_bias_);
  OptionNames names = cli_option_names();  // and which flags were given: one that does not apply is an error
  names.given = [this, flag = names.name](std::string_view key) {
    const CLI::Option* option = cmd_->get_option_no_throw(flag(key));
    return option != nullptr && option->count() > 0;
  };
  validate_options(options_, names);
  ModelStore models;
  const Model& target = models.model(options_.model_dir);
  if (!prompts_file_.empty())
    return run_batch(models, options_, prompts_file_, batch_size_, json_);
  if (cmd_->count("--chat")) {
    std::vector<ChatMessage> messages;
    if (cmd_->count("--system")) messages.push_back({"system", system_});
    messages.push_back({"user", chat_});
    options_.prompt_ids = encode_chat(target.tokenizer(), load_chat_template(options_.model_dir), messages);
  } else {
    options_.prompt_ids = prompt_ids_.empty() ? target.tokenizer().encode(prompt_, true)
                                              : parse_int_list(prompt_ids_, "--prompt-ids");
  }

  // Text mode streams each sample's text, holding back a tail that may begin a stop string
  // until it is decided; with several samples each starts with a "--- sample k ---" line
  // (beam search streams its best and prints the others after).
  std::vector<int> streamed;
  StopStrings text(options_.stop_strings);
  std::size_t shown = 0;
  int current = -1;
  const bool several = options_.num_samples > 1;
  auto begin_sample = [&](int sample) {
    if (several) std::cout << (sample > 0 ? "\n" : "") << "--- sample " << sample + 1 << " ---\n";
    current = sample;
  };
  TokenSink sink;
  if (!json_) {
    sink = [&](int sample, int token, const TokenLogprob*) {  // samples decode side by side: sample 0 streams, the others print after
      if (sample != 0 || text.matched()) return;
      if (current != 0) begin_sample(0);
      text.feed(target.tokenizer().decode_piece(streamed, token));
      streamed.push_back(token);
      std::cout << text.text().substr(shown, text.released() - shown) << std::flush;
      shown = text.released();
    };
  }
  nlohmann::json result = generate(models, options_, sink);
  if (json_) {
    std::cout << result.dump() << std::endl;
    return 0;
  }
  text.end();
  std::cout << text.text().substr(shown);
  const nlohmann::json texts = result.value("sample_texts", nlohmann::json::array());
  for (int s = current + 1; s < static_cast<int>(texts.size()); ++s) {
    begin_sample(s);
    std::cout << texts[s].get<std::string>();
  }
  std::cout << std::endl;
  const nlohmann::json& stats = result.at("stats");
  std::cerr << stats_line(stats) << std::endl;
  // Hugging Face's generate() would sample by default here; say so once, since it is not applied.
  const nlohmann::json suggested = stats.value("generation_config", nlohmann::json::object());
  if (suggested.value("do_sample", false) == true && options_.sampling.strategy != Strategy::kSample) {
    std::cerr << "note: " << options_.model_dir << "/generation_config.json suggests sampling " << suggested.dump()
              << "; not applied (--sampler sample and its flags set it)" << std::endl;
  }
  return 0;
}

}  // namespace specula::cli
