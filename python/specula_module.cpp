// defines: the `specula` Python module — Model (a target model with the settings every request
// on it shares: generate, generate_batch, tokenize, decode), run_experiment, read_results and
// SpeculaError, raised with the CLI's messages.
//
// A request's own settings are config keys (configs/README.md) in an `options` dict, read by the
// parser of `specula generate --prompts-file`'s per-request options: {"sampling.temperature":
// 0.7, "draft.path": "models/draft-1m", "draft.gamma": 4, "output.logprobs": 2, ...}. Results are
// the objects `specula generate --json` prints, as dicts. Decoding runs with the GIL released;
// one request at a time per Model (calls from other threads wait).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "base/error.h"
#include "experiments/engine_backend.h"
#include "experiments/prompt_options.h"
#include "experiments/prompts.h"
#include "experiments/results.h"
#include "experiments/runner.h"
#include "experiments/shards.h"
#include "runtime/batch_run.h"
#include "runtime/generate.h"
#include "text/chat_template.h"

namespace py = pybind11;

namespace specula {
namespace {

// Python values cross as JSON text through Python's own json module; NaN and infinities,
// which JSON lacks, are refused.
nlohmann::json to_json(const py::handle& value, const char* what) {
  const std::string text = py::module_::import("json").attr("dumps")(value).cast<std::string>();
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  SPECULA_CHECK(!parsed.is_discarded(), what, " holds a value JSON cannot carry: ", text.substr(0, 200));
  return parsed;
}

py::object to_python(const nlohmann::json& value) { return py::module_::import("json").attr("loads")(value.dump()); }

// How validation names an option here: the keyword that sets it, else "options.KEY".
OptionNames python_option_names(const nlohmann::json& options) {
  static const std::map<std::string, std::string, std::less<>> kKeywords = {
      {"target.path", "Model(path)"},
      {"target.weights", "Model(weights=)"},
      {"run.threads", "Model(threads=)"},
      {"run.backend", "Model(backend=)"},
      {"run.kv_block_size", "Model(kv_block_size=)"},
      {"run.kv_pool_blocks", "Model(kv_pool_blocks=)"},
      {"run.kv_dtype", "Model(kv_dtype=)"},
      {"run.max_new_tokens", "max_new_tokens"},
      {"run.num_samples", "num_samples"},
      {"run.seeds", "seed"},
      {"prompt", "prompt"}};
  OptionNames names;
  names.name = [](std::string_view key) {
    const auto it = kKeywords.find(key);
    return it != kKeywords.end() ? it->second : "options." + std::string(key);
  };
  return prompt_option_names(options, names);
}

// A prompt: a str (tokenized with BOS), a list of ints (ids as given) or a list of
// {"role", "content"} dicts (rendered with the model's chat_template).
Prompt read_prompt(const py::handle& prompt) {
  Prompt p;
  if (py::isinstance<py::str>(prompt)) {
    p.text = prompt.cast<std::string>();
    SPECULA_CHECK(!p.text.empty(), "prompt is empty");
    return p;
  }
  SPECULA_CHECK(py::isinstance<py::list>(prompt) || py::isinstance<py::tuple>(prompt),
                "prompt must be a str, a list of token ids or a list of {\"role\", \"content\"} messages, got ",
                py::str(prompt.get_type()).cast<std::string>());
  const nlohmann::json items = to_json(prompt, "prompt");
  SPECULA_CHECK(!items.empty(), "prompt is an empty list");
  if (items.front().is_object()) {
    p.messages = read_messages(items, "prompt");
    return p;
  }
  for (const nlohmann::json& id : items) {
    SPECULA_CHECK(id.is_number_integer() && id.get<long long>() >= 0 && id.get<long long>() <= INT_MAX,
                  "prompt holds ", id.dump(), ", not a token id (an int >= 0)");
    p.ids.push_back(id.get<int>());
  }
  return p;
}

class PyModel {
 public:
  PyModel(const std::string& path, int threads, const std::string& backend, std::optional<std::string> weights,
          int kv_block_size, int kv_pool_blocks, std::optional<std::string> kv_dtype) {
    base_.model_dir = std::filesystem::absolute(path).string();
    base_.threads = threads;
    base_.kv_block_size = kv_block_size;
    base_.kv_pool_blocks = kv_pool_blocks;
    const auto kind = parse_enum<BackendKind>(backend);
    SPECULA_CHECK(kind, "Model(backend=) must be ", enum_choices<BackendKind>(), ", got '", backend, "'");
    base_.backend = *kind;
    if (weights)
      SPECULA_CHECK(parse_weights(*weights, base_.weights), "Model(weights=) must be ", weights_choices(), ", got '",
                    *weights, "'");
    if (kv_dtype) {
      base_.kv_dtype = parse_enum<KvDType>(*kv_dtype);
      SPECULA_CHECK(base_.kv_dtype, "Model(kv_dtype=) must be ", enum_choices<KvDType>(), ", got '", *kv_dtype, "'");
    }
    validate_options(base_, python_option_names(nullptr));
    py::gil_scoped_release release;
    target_ = &models_.model(base_.model_dir);
  }

  std::string path() const { return base_.model_dir; }
  int vocab_size() const { return target_->config().vocab_size; }

  std::vector<int> tokenize(const py::handle& prompt) {
    const Prompt p = read_prompt(prompt);
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    return prompt_token_ids(models_, base_.model_dir, p);
  }

  std::string decode(const std::vector<int>& ids) const { return target_->tokenizer().decode(ids); }

  py::object generate(const py::handle& prompt, int max_new_tokens, uint64_t seed, int num_samples,
                      const py::object& options, const std::optional<std::function<void(int, int)>>& on_token) {
    const nlohmann::json keys = options.is_none() ? nlohmann::json() : to_json(options, "options");
    const Prompt p = read_prompt(prompt);
    nlohmann::json result;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      const GenerateOptions request = make_request(p, keys, max_new_tokens, seed, num_samples);
      TokenSink sink;
      if (on_token) {
        sink = [&on_token](int sample, int token, const TokenLogprob*) {
          py::gil_scoped_acquire acquire;
          (*on_token)(sample, token);
        };
      }
      result = specula::generate(models_, request, sink);
    }
    return to_python(result);
  }

  py::object generate_batch(const py::list& prompts, int batch_size, int max_new_tokens, uint64_t seed, int num_samples,
                            const py::object& options, const py::object& request_options) {
    SPECULA_CHECK(!prompts.empty(), "prompts is empty");
    SPECULA_CHECK(batch_size >= 1, "batch_size must be >= 1, got ", batch_size);
    const nlohmann::json shared = options.is_none() ? nlohmann::json() : to_json(options, "options");
    const nlohmann::json own = request_options.is_none() ? nlohmann::json() : to_json(request_options, "request_options");
    SPECULA_CHECK(own.is_null() || (own.is_array() && own.size() == prompts.size()),
                  "request_options must be a list of one dict (or None) per prompt (", prompts.size(), ")");
    std::vector<Prompt> read;
    for (const py::handle& prompt : prompts) read.push_back(read_prompt(prompt));
    BatchRun run;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      std::vector<GenerateOptions> requests;
      for (std::size_t i = 0; i < read.size(); ++i) {
        nlohmann::json keys = shared.is_null() ? nlohmann::json::object() : shared;
        SPECULA_CHECK(keys.is_object(), "options must be a dict of config keys, got ", shared.dump());
        if (!own.is_null() && !own[i].is_null()) {
          SPECULA_CHECK(own[i].is_object(), "request_options[", i, "] must be a dict of config keys, got ", own[i].dump());
          keys.update(own[i]);
        }
        try {
          requests.push_back(make_request(read[i], keys, max_new_tokens, seed, num_samples));
        } catch (const SpeculaError& e) {
          throw SpeculaError(detail::concat("prompts[", i, "]: ", e.what()));
        }
      }
      run = run_requests(models_, requests, batch_size);
    }
    py::dict out;
    out["results"] = to_python(run.results);
    out["summary"] = to_python(run.summary);
    return out;
  }

 private:
  GenerateOptions make_request(const Prompt& prompt, const nlohmann::json& keys, int max_new_tokens, uint64_t seed,
                               int num_samples) {
    GenerateOptions o = base_;
    o.max_new_tokens = max_new_tokens;
    o.seed = seed;
    o.num_samples = num_samples;
    o.prompt_ids = prompt_token_ids(models_, base_.model_dir, prompt);
    apply_prompt_options(keys, o, std::filesystem::current_path(), "on the Model");
    validate_generate_options(models_, o, python_option_names(keys));
    return o;
  }

  GenerateOptions base_;
  ModelStore models_;             // the target and every draft model a request names; under mutex_
  const Model* target_ = nullptr;  // models_'s target, loaded at construction and never replaced
  std::mutex mutex_;
};

py::object read_results_lines(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "results.jsonl").string();
  SPECULA_CHECK(std::filesystem::exists(path), "'", path, "' does not exist");
  nlohmann::json lines = nlohmann::json::array();
  read_results(path, [&](const nlohmann::json& line, std::uint32_t) { lines.push_back(line); });
  return to_python(lines);
}

py::object run_experiment_from(const std::string& config_path, const std::optional<std::string>& out_dir,
                               const std::optional<std::string>& shard, bool quiet) {
  RunOptions options;
  options.quiet = quiet;
  if (out_dir) options.out_dir = *out_dir;
  if (shard) options.shard = parse_shard(*shard);
  std::string directory = out_dir ? std::filesystem::absolute(*out_dir).string() : std::string();
  std::ostringstream out;
  int status = 0;
  {
    py::gil_scoped_release release;
    if (directory.empty()) directory = load_config(config_path).base.output.directory;
    if (options.shard) directory = (std::filesystem::path(directory) / shard_directory(*options.shard)).string();
    EngineBackend backend;
    status = run_experiment(config_path, backend, options, out, std::cerr);
  }
  SPECULA_CHECK(status == 0, "run_experiment: '", config_path, "' ended with status ", status, ": ", out.str());
  py::dict result;
  result["directory"] = directory;
  result["results"] = read_results_lines(directory);
  return result;
}

}  // namespace
}  // namespace specula

PYBIND11_MODULE(specula, m) {
  using specula::PyModel;
  namespace s = specula;
  m.doc() = "specula: speculative decoding research framework (the C++ engine, in process)";
  py::register_exception<s::SpeculaError>(m, "SpeculaError", PyExc_ValueError);

  py::class_<PyModel>(m, "Model", "A target model and the settings every request on it shares.")
      .def(py::init<const std::string&, int, const std::string&, std::optional<std::string>, int, int,
                    std::optional<std::string>>(),
           py::arg("path"), py::kw_only(), py::arg("threads") = 0, py::arg("backend") = "cpu",
           py::arg("weights") = py::none(), py::arg("kv_block_size") = 16, py::arg("kv_pool_blocks") = 0,
           py::arg("kv_dtype") = py::none(),
           "Loads the Hugging Face checkpoint folder `path` (threads 0: every core; backend cpu | cuda; weights: "
           "the format its matrices are read in; the KV cache's block size, pool and element type).")
      .def_property_readonly("path", &PyModel::path)
      .def_property_readonly("vocab_size", &PyModel::vocab_size)
      .def("tokenize", &PyModel::tokenize, py::arg("prompt"),
           "Token ids of a prompt: a str with BOS, or a list of {role, content} messages through the chat template.")
      .def("decode", &PyModel::decode, py::arg("ids"))
      .def("generate", &PyModel::generate, py::arg("prompt"), py::kw_only(), py::arg("max_new_tokens") = 64,
           py::arg("seed") = 0, py::arg("num_samples") = 1, py::arg("options") = py::none(),
           py::arg("on_token") = py::none(),
           "One request: prompt is a str, token ids or chat messages; options a dict of config keys "
           "(sampling.*, draft.*, verify.*, output.logprobs*); on_token(sample, token) sees each token as it is "
           "final. Returns `specula generate --json`'s object: ids, text, stats (samples, logprobs, ...).")
      .def("generate_batch", &PyModel::generate_batch, py::arg("prompts"), py::kw_only(), py::arg("batch_size") = 1,
           py::arg("max_new_tokens") = 64, py::arg("seed") = 0, py::arg("num_samples") = 1,
           py::arg("options") = py::none(), py::arg("request_options") = py::none(),
           "Every prompt through one continuous-batching scheduler with batch_size live sequences; "
           "request_options[i] adds config keys to request i. Returns {results: [...], summary: {...}}.");

  m.def("run_experiment", &s::run_experiment_from, py::arg("config"), py::kw_only(), py::arg("out_dir") = py::none(),
        py::arg("shard") = py::none(), py::arg("quiet") = true,
        "`specula run CONFIG` in process (resumes like it). Returns {directory, results: [one dict per results line]}.");
  m.def("read_results", &s::read_results_lines, py::arg("directory"),
        "The lines of an experiment directory's results.jsonl, as dicts.");
}
