// Loading and validating config.json and safetensors checkpoints: the bundled models and small
// synthetic checkpoints written to a temporary folder load; every malformed case fails with a
// SpeculaError whose message names the file and the key or tensor at fault.
#include <unistd.h>

#include <immintrin.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "base/error.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "tests/test_engine_support.h"
#include "tests/test_support.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Contains;
using nlohmann::json;

using test::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A safetensors file: 8-byte little-endian header length, header text, data bytes.
void write_safetensors_raw(const std::string& path, const std::string& header, const std::string& data,
                           uint64_t header_len) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &header_len, 8);
  write_text(path, bytes + header + data);
}

void write_safetensors_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_safetensors_raw(path, header, data, header.size());
}

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Well-formed file with tensors laid out back to back, filled with small random values. The
// header is padded to an odd length so the data section is misaligned (the loader must cope).
void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  json header = json::object();
  std::string data;
  for (const Tensor& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const std::size_t begin = data.size();
    for (int64_t i = 0; i < numel; ++i) {
      float v = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (t.dtype == DType::F32) {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {  // F16 and BF16 both: a valid 16-bit pattern of a small normal number
        const uint16_t h = t.dtype == DType::BF16 ? static_cast<uint16_t>(bits >> 16) : _cvtss_sh(v, 0);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  if (text.size() % 2 == 0) text += ' ';
  write_safetensors_raw(path, text, data);
}

// The tiny LLaMA every synthetic checkpoint uses: hidden 16, 2 layers, 2 heads over 1 KV head
// (GQA), ffn 32, the real 4096-piece tokenizer.
json tiny_config() {
  return {{"hidden_size", 16},      {"intermediate_size", 32},   {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"num_hidden_layers", 2},  {"vocab_size", 4096},
          {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
          {"tie_word_embeddings", false}, {"hidden_act", "silu"}, {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

std::vector<Tensor> tiny_tensors(DType dtype) {
  std::vector<Tensor> t = {{"model.embed_tokens.weight", dtype, {4096, 16}},
                           {"model.norm.weight", dtype, {16}},
                           {"lm_head.weight", dtype, {4096, 16}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto [name, shape] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
             {"self_attn.q_proj.weight", {16, 16}}, {"self_attn.k_proj.weight", {8, 16}},
             {"self_attn.v_proj.weight", {8, 16}},  {"self_attn.o_proj.weight", {16, 16}},
             {"mlp.gate_proj.weight", {32, 16}},     {"mlp.up_proj.weight", {32, 16}},
             {"mlp.down_proj.weight", {16, 32}},     {"input_layernorm.weight", {16}},
             {"post_attention_layernorm.weight", {16}}}) {
      t.push_back({p + name, dtype, shape});
    }
  }
  return t;
}

// A complete tiny model folder: config.json, model.safetensors, tokenizer.model.
void write_tiny_model(const TempDir& dir, const json& config, const std::vector<Tensor>& tensors) {
  write_text(dir.file("config.json"), config.dump());
  write_safetensors(dir.file("model.safetensors"), tensors);
  fs::copy_file(test::model_dir("draft-1m") + "/tokenizer.model", dir.file("tokenizer.model"));
}

std::vector<Tensor> without(std::vector<Tensor> tensors, const std::string& name) {
  std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; });
  return tensors;
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "cfg.json"); }

json with(json j, const char* key, const json& value) {
  j[key] = value;
  return j;
}

}  // namespace

TEST_CASE("config: the bundled models' config.json load with their values", "[engine][config]") {
  const ModelConfig t = load_model_config(test::model_dir("target-16m") + "/config.json");
  CHECK(t.hidden_size == 384);
  CHECK(t.intermediate_size == 1024);
  CHECK(t.num_attention_heads == 6);
  CHECK(t.num_key_value_heads == 2);
  CHECK(t.num_hidden_layers == 8);
  CHECK(t.vocab_size == 4096);
  CHECK(t.max_position_embeddings == 2048);
  CHECK(t.rms_norm_eps == 1e-5f);
  CHECK(t.rope_theta == 10000.0f);
  CHECK(!t.tie_word_embeddings);
  CHECK(t.head_dim() == 64);
  CHECK(t.kv_dim() == 128);
  CHECK(load_model_config(test::model_dir("draft-1m") + "/config.json").tie_word_embeddings);
  // num_key_value_heads defaults to num_attention_heads (multi-head attention).
  json mha = tiny_config();
  mha.erase("num_key_value_heads");
  CHECK(parse(mha).num_key_value_heads == 2);
}

TEST_CASE("config: each malformed config.json names the file and the key", "[engine][config]") {
  const json good = tiny_config();
  REQUIRE_NOTHROW(parse(good));
  CHECK_THROWS_WITH(load_model_config("/nonexistent/config.json"),
                    Contains("/nonexistent/config.json") && Contains("cannot open"));
  CHECK_THROWS_WITH(parse_model_config("{\"hidden_size\": 16,", "cfg.json"),
                    Contains("cfg.json") && Contains("invalid JSON"));
  CHECK_THROWS_WITH(parse_model_config("[1, 2]", "cfg.json"), Contains("cfg.json: expected a JSON object"));
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size"}) {
    json j = good;
    j.erase(key);
    CHECK_THROWS_WITH(parse(j), Contains("cfg.json") && Contains(std::string("missing key '") + key + "'"));
  }
  CHECK_THROWS_WITH(parse(with(good, "hidden_size", "16")), Contains("cfg.json: key 'hidden_size' must be an integer"));
  CHECK_THROWS_WITH(parse(with(good, "num_hidden_layers", 2.5)), Contains("key 'num_hidden_layers' must be an integer"));
  CHECK_THROWS_WITH(parse(with(good, "rms_norm_eps", "small")), Contains("key 'rms_norm_eps' must be a number"));
  CHECK_THROWS_WITH(parse(with(good, "tie_word_embeddings", 1)), Contains("key 'tie_word_embeddings' must be a boolean"));
  CHECK_THROWS_WITH(parse(with(good, "hidden_size", 10000000000LL)), Contains("key 'hidden_size'"));
  CHECK_THROWS_WITH(parse(with(good, "num_hidden_layers", 0)), Contains("key 'num_hidden_layers' must be positive"));
  CHECK_THROWS_WITH(parse(with(good, "vocab_size", -3)), Contains("key 'vocab_size' must be positive"));
  CHECK_THROWS_WITH(parse(with(good, "rope_theta", 0.0)), Contains("key 'rope_theta' must be positive"));
  CHECK_THROWS_WITH(parse(with(with(good, "hidden_size", 18), "num_attention_heads", 4)),
                    Contains("key 'num_attention_heads' (4) must divide 'hidden_size' (18)"));
  CHECK_THROWS_WITH(parse(with(with(good, "num_attention_heads", 4), "num_key_value_heads", 3)),
                    Contains("key 'num_key_value_heads' (3) must divide 'num_attention_heads' (4)"));
  CHECK_THROWS_WITH(parse(with(with(good, "hidden_size", 6), "num_attention_heads", 2)), Contains("must be even"));
  CHECK_THROWS_WITH(parse(with(good, "eos_token_id", 4096)), Contains("key 'eos_token_id' = 4096 is outside"));
  CHECK_THROWS_WITH(parse(with(good, "hidden_act", "gelu")), Contains("key 'hidden_act'"));
}

TEST_CASE("config: model types, architectures and keys the forward pass does not implement are refused with their values",
          "[engine][config]") {
  const json good = tiny_config();
  CHECK_NOTHROW(parse(with(with(good, "model_type", "llama"), "architectures", {"LlamaForCausalLM"})));
  CHECK_THROWS_WITH(parse(with(good, "model_type", "gemma")),
                    Contains("cfg.json: key 'model_type' = \"gemma\" is not supported (supported: llama, mistral, qwen2, qwen3)"));
  CHECK_THROWS_WITH(parse(with(good, "architectures", {"LlamaForCausalLM", "Qwen2ForCausalLM"})),
                    Contains("key 'architectures' = \"Qwen2ForCausalLM\" is not supported for model_type \"llama\" "
                             "(supported: LlamaForCausalLM)"));
  CHECK_THROWS_WITH(parse(with(good, "architectures", "LlamaForCausalLM")), Contains("key 'architectures' must be a list"));
  CHECK_THROWS_WITH(parse(with(good, "hidden_act", "gelu")), Contains("key 'hidden_act' must be \"silu\" (LLaMA family), got \"gelu\""));
  CHECK_THROWS_WITH(parse(with(good, "rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}})),
                    Contains("key 'rope_scaling' = {\"factor\":2.0,\"rope_type\":\"dynamic\"} is not supported "
                             "(rope types: default, linear, llama3)"));
  CHECK_THROWS_WITH(parse(with(good, "rope_scaling", {{"type", "yarn"}, {"factor", 4.0}})),
                    Contains("key 'rope_scaling' = {\"factor\":4.0,\"type\":\"yarn\"} is not supported"));
  CHECK_THROWS_WITH(parse(with(good, "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}})),
                    Contains("cfg.json: rope_scaling: missing key 'low_freq_factor'"));
  CHECK_THROWS_WITH(parse(with(good, "rope_scaling", {{"rope_type", "linear"}, {"factor", -2.0}})),
                    Contains("rope_scaling: key 'factor' must be positive, got -2"));
  CHECK(parse(with(good, "rope_scaling", {{"type", "linear"}, {"factor", 2.0}})).rope_scaling.factor == 2.0f);
  CHECK_NOTHROW(parse(with(good, "rope_scaling", nullptr)));
  // Biases: LLaMA's attention_bias / mlp_bias are honoured; Mistral and Qwen2 have fixed ones.
  CHECK(parse(with(good, "attention_bias", true)).o_bias);
  CHECK(parse(with(good, "mlp_bias", true)).mlp_bias);
  CHECK_THROWS_WITH(parse(with(with(good, "model_type", "mistral"), "attention_bias", true)),
                    Contains("key 'attention_bias' = true is not supported for this model type"));
  CHECK_THROWS_WITH(parse(with(with(good, "model_type", "qwen2"), "mlp_bias", true)),
                    Contains("key 'mlp_bias' = true is not supported for this model type"));
  // Sliding windows: Mistral's is honoured (4096 when absent, none when null); others refused.
  CHECK(parse(with(good, "model_type", "mistral")).sliding_window == 4096);
  CHECK(parse(with(with(good, "model_type", "mistral"), "sliding_window", nullptr)).sliding_window == 0);
  CHECK_THROWS_WITH(parse(with(good, "sliding_window", 4096)),
                    Contains("key 'sliding_window' = 4096 is not supported for this model type"));
  CHECK_THROWS_WITH(parse(with(with(good, "model_type", "qwen2"), "use_sliding_window", true)),
                    Contains("key 'use_sliding_window' = true is not supported"));
  // Qwen2 style: a window that use_sliding_window = false switches off.
  CHECK(parse(with(with(with(good, "model_type", "qwen2"), "sliding_window", 4096), "use_sliding_window", false))
            .sliding_window == 0);
  CHECK_THROWS_WITH(parse(with(good, "layer_types", {"full_attention", "sliding_attention"})),
                    Contains("key 'layer_types' = [\"full_attention\",\"sliding_attention\"] is not supported"));
  CHECK_NOTHROW(parse(with(good, "layer_types", {"full_attention", "full_attention"})));
  // head_dim: its own width (q_dim = heads x head_dim need not be hidden); Qwen3's is 128 when absent.
  CHECK(parse(with(good, "head_dim", 32)).q_dim() == 64);
  CHECK(parse(with(good, "model_type", "qwen3")).head_dim() == 128);
  CHECK_THROWS_WITH(parse(with(good, "head_dim", 7)), Contains("head dimension 7") && Contains("must be even and positive"));
  CHECK_THROWS_WITH(parse(with(good, "partial_rotary_factor", 0.5)), Contains("key 'partial_rotary_factor' = 0.5 is not supported"));
  CHECK_THROWS_WITH(parse(with(good, "quantization_config", {{"quant_method", "gptq"}})),
                    Contains("key 'quantization_config' = {\"quant_method\":\"gptq\"} is not supported"));
  CHECK_THROWS_WITH(parse(with(good, "rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}})),
                    Contains("key 'rope_parameters' = {\"factor\":4.0,\"rope_type\":\"yarn\"} is not supported"));
  // transformers >= 5 keeps rope_theta in rope_parameters.
  CHECK(parse(with(good, "rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}})).rope_theta == 500000.0f);
}

TEST_CASE("config: eos_token_id is an integer or a list — generation_config.json's replaces it", "[engine][config]") {
  const json good = tiny_config();
  ModelConfig c = parse(with(good, "eos_token_id", {3, 2, 7}));
  CHECK(c.eos_token_ids == std::vector<int>{3, 2, 7});
  CHECK(c.eos_token_id == 3);
  CHECK(parse(good).eos_token_ids == std::vector<int>{2});
  CHECK_THROWS_WITH(parse(with(good, "eos_token_id", json::array())),
                    Contains("key 'eos_token_id' must be a token id or a non-empty list of them, got []"));
  CHECK_THROWS_WITH(parse(with(good, "eos_token_id", {2, "x"})), Contains("key 'eos_token_id' must be a token id"));
  CHECK_THROWS_WITH(parse(with(good, "eos_token_id", {2, 5000})), Contains("key 'eos_token_id' = 5000 is outside"));
  apply_generation_config(c, R"({"eos_token_id": [9, 10], "temperature": 0.6, "transformers_version": "4.45"})",
                          "gen.json");
  CHECK(c.eos_token_ids == std::vector<int>{9, 10});
  CHECK(c.eos_token_id == 9);
  // Sampling defaults are recorded to be reported, not applied; token ids and versions are not.
  using Defaults = std::vector<std::pair<std::string, std::string>>;
  CHECK(c.generation_defaults == Defaults{{"temperature", "0.6"}});
  apply_generation_config(c, R"({"do_sample": true, "top_p": 0.9, "pad_token_id": 0})", "gen.json");  // no EOS ids: the config's stay
  CHECK(c.eos_token_ids == std::vector<int>{9, 10});
  CHECK(c.generation_defaults == Defaults{{"do_sample", "true"}, {"top_p", "0.9"}});
  CHECK_THROWS_WITH(apply_generation_config(c, R"({"eos_token_id": 4096})", "gen.json"),
                    Contains("gen.json: key 'eos_token_id' = 4096 is outside"));
  CHECK_THROWS_WITH(apply_generation_config(c, "{", "gen.json"), Contains("gen.json: invalid JSON"));

  TempDir dir;
  write_tiny_model(dir, good, tiny_tensors(DType::F32));
  write_text(dir.file("generation_config.json"), R"({"bos_token_id": 1, "eos_token_id": [2, 5]})");
  CHECK(Model(dir.path.string()).config().eos_token_ids == std::vector<int>{2, 5});
  write_text(dir.file("generation_config.json"), R"({"eos_token_id": -1})");
  CHECK_THROWS_WITH(Model(dir.path.string()), Contains(dir.file("generation_config.json")) && Contains("key 'eos_token_id'"));
}

TEST_CASE("safetensors: a well-formed file loads with its tensors' shapes, dtypes and bytes", "[engine][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  // Two tensors back to back; the data section starts at an odd address.
  const std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}} )";
  std::string data(22, '\0');
  const float a[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  std::memcpy(data.data(), a, 16);
  const uint16_t b[3] = {0x3f80, 0x4000, 0xc040};  // 1, 2, -3 in BF16
  std::memcpy(data.data() + 16, b, 6);
  write_safetensors_raw(path, header, data);
  SafetensorsFile file(path);
  REQUIRE(file.tensors().size() == 2);
  const TensorView& ta = file.tensors().at("a");
  CHECK(ta.dtype == DType::F32);
  CHECK(ta.shape == std::vector<int64_t>{2, 2});
  CHECK(std::memcmp(ta.data, a, 16) == 0);
  CHECK(ta.origin == path);
  const TensorView& tb = file.tensors().at("b");
  CHECK(tb.dtype == DType::BF16);
  CHECK(tb.numel() == 3);
  CHECK(std::memcmp(tb.data, b, 6) == 0);
}

TEST_CASE("safetensors: each malformed file names the file and the tensor", "[engine][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto load_raw = [&](const std::string& header, std::size_t data_bytes) {
    write_safetensors_raw(path, header, std::string(data_bytes, '\0'));
    SafetensorsFile file(path);
  };

  write_text(path, "abcde");
  CHECK_THROWS_WITH(SafetensorsFile(path), Contains(path) && Contains("truncated"));
  write_safetensors_raw(path, "{}", "", 1000);
  CHECK_THROWS_WITH(SafetensorsFile(path), Contains(path) && Contains("header length 1000 runs past the end"));
  write_safetensors_raw(path, "{}", "", ~uint64_t(0));
  CHECK_THROWS_WITH(SafetensorsFile(path), Contains(path) && Contains("runs past the end"));
  CHECK_THROWS_WITH(SafetensorsFile(dir.file("absent.safetensors")),
                    Contains(dir.file("absent.safetensors")) && Contains("cannot open"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 16),
                    Contains(path) && Contains("header is not valid JSON"));
  CHECK_THROWS_WITH(load_raw(R"([1,2])", 0), Contains(path) && Contains("header must be a JSON object"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", 16),
                    Contains(path) && Contains("tensor 'a'") && Contains("out of range"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", 16),
                    Contains("tensor 'a'") && Contains("out of range"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                             24),
                    Contains(path) && Contains("tensors 'a' and 'b' overlap"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16),
                    Contains(path) && Contains("tensor 'a'") && Contains("12 bytes but shape [4] x F32 needs 16"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,16]}})", 16),
                    Contains("tensor 'a'") && Contains("shape [2, 3] x F16 needs 12"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4),
                    Contains(path) && Contains("tensor 'a' has unsupported dtype 'I8'"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4]}})", 16),
                    Contains("tensor 'a' needs dtype, shape and data_offsets"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", 16),
                    Contains("tensor 'a'") && Contains("bad dimension -4"));
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[-1,15]}})", 16),
                    Contains("tensor 'a'") && Contains("data_offsets"));
  // An element count that overflows 64 bits is an error, not undefined behaviour.
  CHECK_THROWS_WITH(load_raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16),
                    Contains(path) && Contains("tensor 'a'"));
}

TEST_CASE("checkpoint: a tiny synthetic model loads in F32, BF16 and F16 and runs", "[engine][safetensors]") {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(dtype));
    TempDir dir;
    write_tiny_model(dir, tiny_config(), tiny_tensors(dtype));
    Model model(dir.path.string());
    const auto backend = make_backend(BackendKind::kCpu, model, std::nullopt);
    CHECK(model.config().kv_dim() == 8);
    // Matrices read per decode step: 2 x (q, k, v, o, gate, up, down) + lm_head.
    const std::size_t matrix_elems = 2 * (16 * 16 + 8 * 16 + 8 * 16 + 16 * 16 + 3 * 32 * 16) + 4096 * 16;
    CHECK(backend->weight_bytes() == matrix_elems * dtype_size(dtype));
    test::Engine e(*backend, 4, 8);
    KvCache& cache = e.cache;
    const int seq = cache.create();
    const std::vector<int> tokens = {1, 400, 13}, positions = {0, 1, 2};
    std::vector<float> logits(3 * 4096);
    e.forward(seq, {tokens, positions, {}, true}, logits);
    CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
  }
}

TEST_CASE("checkpoint: tied embeddings need no lm_head", "[engine][safetensors]") {
  TempDir dir;
  write_tiny_model(dir, with(tiny_config(), "tie_word_embeddings", true),
                   without(tiny_tensors(DType::F32), "lm_head.weight"));
  CHECK_NOTHROW(Model(dir.path.string()));
}

TEST_CASE("checkpoint: shards listed in model.safetensors.index.json load — faults are named", "[engine][safetensors]") {
  TempDir dir;
  write_text(dir.file("config.json"), tiny_config().dump());
  fs::copy_file(test::model_dir("draft-1m") + "/tokenizer.model", dir.file("tokenizer.model"));
  const auto all = tiny_tensors(DType::BF16);
  const std::vector<Tensor> first(all.begin(), all.begin() + 5), second(all.begin() + 5, all.end());
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), first);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), second);
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (const Tensor& t : first) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const Tensor& t : second) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write_text(dir.file("model.safetensors.index.json"), index.dump());
  CHECK_NOTHROW(Model(dir.path.string()));

  // A tensor in both shards, a shard that is absent, an index that is not JSON.
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), all);
  CHECK_THROWS_WITH(Checkpoint(dir.path.string()), Contains("appears in both") &&
                                                       Contains("model-00001-of-00002.safetensors") &&
                                                       Contains("model-00002-of-00002.safetensors"));
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), second);
  index["weight_map"]["lm_head.weight"] = "model-00003-of-00002.safetensors";
  write_text(dir.file("model.safetensors.index.json"), index.dump());
  CHECK_THROWS_WITH(Checkpoint(dir.path.string()),
                    Contains("model-00003-of-00002.safetensors") && Contains("cannot open"));
  write_text(dir.file("model.safetensors.index.json"), "{\"weight_map\": ");
  CHECK_THROWS_WITH(Checkpoint(dir.path.string()),
                    Contains("model.safetensors.index.json") && Contains("invalid JSON"));
  write_text(dir.file("model.safetensors.index.json"), "{}");
  CHECK_THROWS_WITH(Checkpoint(dir.path.string()), Contains("key 'weight_map'"));
}

TEST_CASE("checkpoint: missing or mis-shaped tensors and other folder faults are named", "[engine][safetensors]") {
  const std::vector<Tensor> good = tiny_tensors(DType::F32);
  {
    TempDir dir;
    write_tiny_model(dir, tiny_config(), without(good, "model.layers.1.mlp.up_proj.weight"));
    CHECK_THROWS_WITH(Model(dir.path.string()),
                      Contains(dir.path.string()) && Contains("missing tensor 'model.layers.1.mlp.up_proj.weight'"));
  }
  {
    TempDir dir;
    write_tiny_model(dir, tiny_config(), without(good, "lm_head.weight"));  // untied: lm_head required
    CHECK_THROWS_WITH(Model(dir.path.string()), Contains("missing tensor 'lm_head.weight'"));
  }
  {
    TempDir dir;
    std::vector<Tensor> bad = good;
    for (Tensor& t : bad)
      if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {16, 16};  // as if kv heads = heads
    write_tiny_model(dir, tiny_config(), bad);
    CHECK_THROWS_WITH(Model(dir.path.string()),
                      Contains(dir.file("model.safetensors")) &&
                          Contains("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 16], expected [8, 16]"));
  }
  {
    TempDir dir;
    write_tiny_model(dir, with(tiny_config(), "vocab_size", 4000), good);
    CHECK_THROWS_WITH(Model(dir.path.string()),
                      Contains("tokenizer.model: 4096 pieces do not fit the model's vocab_size = 4000"));
  }
  {
    TempDir dir;
    write_tiny_model(dir, tiny_config(), good);
    write_text(dir.file("config.json"), "{ not json");
    CHECK_THROWS_WITH(Model(dir.path.string()), Contains(dir.file("config.json")) && Contains("invalid JSON"));
    fs::remove(dir.file("config.json"));
    CHECK_THROWS_WITH(Model(dir.path.string()), Contains(dir.file("config.json")) && Contains("cannot open"));
  }
  {
    TempDir dir;
    write_tiny_model(dir, tiny_config(), good);
    fs::remove(dir.file("model.safetensors"));
    CHECK_THROWS_WITH(Model(dir.path.string()), Contains("no model.safetensors"));
  }
  {
    TempDir dir;
    write_tiny_model(dir, tiny_config(), good);
    fs::remove(dir.file("tokenizer.model"));
    CHECK_THROWS_WITH(Model(dir.path.string()), Contains(dir.path.string() + ": no tokenizer.model or tokenizer.json"));
  }
}

TEST_CASE("checkpoint: every tensor is used or named in an error", "[engine][safetensors]") {
  const std::vector<Tensor> good = tiny_tensors(DType::F32);
  {
    TempDir dir;  // a q bias in a LLaMA checkpoint without attention_bias
    std::vector<Tensor> t = good;
    t.push_back({"model.layers.1.self_attn.q_proj.bias", DType::F32, {16}});
    write_tiny_model(dir, tiny_config(), t);
    CHECK_THROWS_WITH(Model(dir.path.string()),
                      Contains(dir.file("model.safetensors")) && Contains("unknown tensor 'model.layers.1.self_attn.q_proj.bias'"));
    // and the family's own tensors are required: Qwen2's q/k/v biases
    TempDir qwen;
    write_tiny_model(qwen, with(tiny_config(), "model_type", "qwen2"), good);
    CHECK_THROWS_WITH(Model(qwen.path.string()), Contains("missing tensor 'model.layers.0.self_attn.q_proj.bias'"));
  }
  // RoPE's saved inverse frequencies are accepted (and recomputed) at their shape only.
  for (int64_t width : {4, 8}) {
    TempDir dir;
    std::vector<Tensor> t = good;
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::F32, {width}});
    write_tiny_model(dir, tiny_config(), t);
    if (width == 4) {
      CHECK_NOTHROW(Model(dir.path.string()));
    } else {
      CHECK_THROWS_WITH(Model(dir.path.string()),
                        Contains("tensor 'model.layers.0.self_attn.rotary_emb.inv_freq' has shape [8], expected [4]"));
    }
  }
  {
    TempDir dir;  // tied: a saved lm_head must be the embedding (write_safetensors fills each tensor differently)
    write_tiny_model(dir, with(tiny_config(), "tie_word_embeddings", true), good);
    CHECK_THROWS_WITH(Model(dir.path.string()),
                      Contains("tensor 'lm_head.weight' differs from 'model.embed_tokens.weight'") &&
                          Contains("tie_word_embeddings = true"));
  }
}

TEST_CASE("checkpoint: the bundled models load with the weight bytes their configs imply", "[engine][safetensors]") {
  struct Expect { const char* name; std::size_t bytes_per_weight; };
  for (const Expect& e : {Expect{"target-16m", 2}, Expect{"draft-4m", 2}, Expect{"draft-1m", 4}}) {
    INFO(e.name);
    const Backend& m = test::shared_backend(test::model_dir(e.name));
    const ModelConfig& c = m.config();
    const std::size_t h = c.hidden_size, kv = c.kv_dim(), f = c.intermediate_size;
    const std::size_t per_layer = 2 * h * h + 2 * kv * h + 3 * h * f;
    CHECK(m.weight_bytes() == (c.num_hidden_layers * per_layer + std::size_t(c.vocab_size) * h) * e.bytes_per_weight);
  }
}

}  // namespace specula
