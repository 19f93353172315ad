#include "model/checkpoint_writer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/memory.h"
#include "text/tokenizer.h"
#include "base/rng.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

int64_t numel(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

std::size_t element_size(const TensorSpec& t) {
  if (!t.index) return dtype_size(t.dtype);
  return *t.index == IndexTensorView::Type::kI64 ? 8 : *t.index == IndexTensorView::Type::kI32 ? 4 : 1;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                       const std::function<void(std::size_t, std::span<unsigned char>)>& fill) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(numel(t)) * element_size(t);
    header[t.name] = {{"dtype", t.index ? index_type_name(*t.index) : dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  SPECULA_CHECK(out.good(), path, ": cannot open for writing");
  const uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<unsigned char> bytes;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    bytes.assign(static_cast<std::size_t>(numel(tensors[i])) * element_size(tensors[i]), 0);
    fill(i, bytes);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  out.close();
  SPECULA_CHECK(!out.fail(), path, ": write failed (disk full?)");
}

std::vector<TensorSpec> checkpoint_tensors(const ModelConfig& c, DType dtype) {
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size, kv = c.kv_dim(), vocab = c.vocab_size;
  const int64_t q_dim = c.q_dim(), head_dim = c.head_dim();
  std::vector<TensorSpec> t = {{"model.embed_tokens.weight", dtype, {vocab, hidden}}};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const auto add = [&](bool present, const char* name, std::vector<int64_t> shape) {
      if (present) t.push_back({p + name, dtype, std::move(shape)});
    };
    add(true, "input_layernorm.weight", {hidden});
    add(true, "self_attn.q_proj.weight", {q_dim, hidden});
    add(c.attention_bias, "self_attn.q_proj.bias", {q_dim});
    add(true, "self_attn.k_proj.weight", {kv, hidden});
    add(c.attention_bias, "self_attn.k_proj.bias", {kv});
    add(true, "self_attn.v_proj.weight", {kv, hidden});
    add(c.attention_bias, "self_attn.v_proj.bias", {kv});
    add(c.qk_norm, "self_attn.q_norm.weight", {head_dim});
    add(c.qk_norm, "self_attn.k_norm.weight", {head_dim});
    add(true, "self_attn.o_proj.weight", {hidden, q_dim});
    add(c.o_bias, "self_attn.o_proj.bias", {hidden});
    add(true, "post_attention_layernorm.weight", {hidden});
    add(true, "mlp.gate_proj.weight", {ffn, hidden});
    add(c.mlp_bias, "mlp.gate_proj.bias", {ffn});
    add(true, "mlp.up_proj.weight", {ffn, hidden});
    add(c.mlp_bias, "mlp.up_proj.bias", {ffn});
    add(true, "mlp.down_proj.weight", {hidden, ffn});
    add(c.mlp_bias, "mlp.down_proj.bias", {hidden});
  }
  t.push_back({"model.norm.weight", dtype, {hidden}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", dtype, {vocab, hidden}});
  return t;
}

std::string checkpoint_config_json(const ModelConfig& c, DType dtype) {
  const char* torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  struct Names {
    const char* model_type;
    const char* architecture;
  };
  const Names names = c.family == ModelFamily::kMistral ? Names{"mistral", "MistralForCausalLM"}
                      : c.family == ModelFamily::kQwen2 ? Names{"qwen2", "Qwen2ForCausalLM"}
                      : c.family == ModelFamily::kQwen3 ? Names{"qwen3", "Qwen3ForCausalLM"}
                                                        : Names{"llama", "LlamaForCausalLM"};
  nlohmann::json j = {{"architectures", {names.architecture}},
                      {"model_type", names.model_type},
                      {"hidden_act", "silu"},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_attention_heads", c.num_attention_heads},
                      {"num_key_value_heads", c.num_key_value_heads},
                      {"num_hidden_layers", c.num_hidden_layers},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_position_embeddings},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"tie_word_embeddings", c.tie_word_embeddings},
                      {"bos_token_id", c.bos_token_id},
                      {"torch_dtype", torch_dtype},
                      {"initializer_range", 0.02}};
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_id) : nlohmann::json(c.eos_token_ids);
  if (c.explicit_head_dim > 0) j["head_dim"] = c.explicit_head_dim;
  if (c.family == ModelFamily::kLlama) j["mlp_bias"] = c.mlp_bias;
  if (c.family == ModelFamily::kLlama || c.family == ModelFamily::kQwen3) j["attention_bias"] = c.attention_bias;
  if (c.family == ModelFamily::kMistral)
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
  if (c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3) j["use_sliding_window"] = false;
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kLinear) j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  if (r.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  return j.dump(2);
}

ModelConfig preset_shape(const std::string& name) {
  struct Preset {
    const char* name;
    ModelConfig shape;
  };
  const auto shape = [](int hidden, int ffn, int heads, int kv_heads, int layers, int vocab, int positions,
                        bool tied) {
    ModelConfig c;
    c.hidden_size = hidden;
    c.intermediate_size = ffn;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.num_hidden_layers = layers;
    c.vocab_size = vocab;
    c.max_position_embeddings = positions;
    c.tie_word_embeddings = tied;
    return c;
  };
  // Llama 3.1/3.2's RoPE: theta 500000, llama3 scaling (factor 32 for 3.2, from 8192 positions).
  const auto llama3 = [](ModelConfig c, int head_dim, bool biases) {
    c.family = ModelFamily::kLlama;
    c.explicit_head_dim = head_dim;
    c.attention_bias = c.o_bias = c.mlp_bias = biases;
    c.rope_theta = 500000.0f;
    c.rope_scaling = {RopeScaling::Type::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
    return c;
  };
  const auto qwen = [](ModelConfig c, ModelFamily family, int head_dim) {
    c.family = family;
    c.attention_bias = family == ModelFamily::kQwen2;
    c.qk_norm = family == ModelFamily::kQwen3;
    c.explicit_head_dim = head_dim;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    return c;
  };
  const auto mistral = [](ModelConfig c, int window) {
    c.family = ModelFamily::kMistral;
    c.sliding_window = window;
    return c;
  };
  const Preset presets[] = {
      {"tinyllama-1.1b", shape(2048, 5632, 32, 4, 22, 32000, 2048, false)},
      {"target-16m", shape(384, 1024, 6, 2, 8, 4096, 2048, false)},
      {"draft-4m", shape(256, 768, 4, 4, 4, 4096, 2048, true)},
      {"draft-1m", shape(128, 384, 2, 2, 2, 4096, 2048, true)},
      {"llama3", llama3(shape(64, 128, 4, 2, 2, 4096, 131072, false), 32, true)},
      {"qwen2", qwen(shape(64, 128, 4, 2, 2, 4096, 32768, true), ModelFamily::kQwen2, 0)},
      {"qwen3", qwen(shape(64, 128, 4, 2, 2, 4096, 40960, true), ModelFamily::kQwen3, 32)},
      {"mistral", mistral(shape(64, 128, 4, 2, 2, 4096, 32768, false), 4)},
      {"llama3.2-1b", llama3(shape(2048, 8192, 32, 8, 16, 128256, 131072, true), 64, false)},
      {"qwen2.5-0.5b", qwen(shape(896, 4864, 14, 2, 24, 151936, 32768, true), ModelFamily::kQwen2, 0)},
      {"qwen3-0.6b", qwen(shape(1024, 3072, 16, 8, 28, 151936, 40960, true), ModelFamily::kQwen3, 128)}};
  std::string known;
  for (const Preset& p : presets) {
    if (name == p.name) return p.shape;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  throw SpeculaError(detail::concat("unknown shape preset '", name, "' (known: ", known, ")"));
}

namespace {

// Bytes of every tensor and of the largest (one is in memory at a time), or a SpeculaError
// naming the shape when they overflow.
std::pair<uint64_t, uint64_t> checkpoint_bytes(const std::vector<TensorSpec>& tensors, const ModelConfig& shape) {
  uint64_t total = 0, largest = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape)
      SPECULA_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes), "the requested shape: tensor '",
                    t.name, "' is too large (hidden_size ", shape.hidden_size, ", vocab_size ", shape.vocab_size, ")");
    SPECULA_CHECK(!__builtin_add_overflow(total, bytes, &total), "the requested shape is too large");
    largest = std::max(largest, bytes);
  }
  return {total, largest};
}

void write_checkpoint_files(const std::string& dir, const RandomCheckpoint& o, const std::string& config_text,
                            const std::vector<TensorSpec>& tensors) {
  fs::copy_file(o.tokenizer_model, fs::path(dir) / "tokenizer.model");
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << config_text << '\n';
    SPECULA_CHECK(out.good(), dir, "/config.json: write failed");
  }
  const float half_width = o.weight_std * std::sqrt(3.0f);  // uniform with standard deviation weight_std
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                    [&](std::size_t index, std::span<unsigned char> bytes) {
                      const TensorSpec& t = tensors[index];
                      const std::size_t es = dtype_size(t.dtype);
                      const bool norm = t.name.ends_with("norm.weight");
                      const Philox rng(o.seed, index);  // one stream per (seed, tensor)
                      const std::size_t count = bytes.size() / es;
                      std::array<uint32_t, 4> block{};
                      for (std::size_t i = 0; i < count; ++i) {
                        if (i % 4 == 0) block = rng.block(i / 4);
                        // 24 random bits of the block's lane i % 4 -> uniform in [-a, a).
                        const float u = 2.0f * static_cast<float>(block[i % 4] >> 8) / 16777216.0f - 1.0f;
                        store_value(norm ? 1.0f : half_width * u, t.dtype, &bytes[i * es]);
                      }
                    });
}

}  // namespace

void write_random_checkpoint(const std::string& dir, const RandomCheckpoint& o) {
  const std::string config_text = checkpoint_config_json(o.shape, o.dtype);
  parse_model_config(config_text, "the requested shape");  // names the offending key
  const Tokenizer tokenizer(o.tokenizer_model, o.shape.vocab_size);  // the pieces must fit
  SPECULA_CHECK(o.weight_std > 0, "the weights' standard deviation must be positive, got ", o.weight_std);
  const std::vector<TensorSpec> tensors = checkpoint_tensors(o.shape, o.dtype);
  const auto [total, largest] = checkpoint_bytes(tensors, o.shape);
  const auto gib = [](uint64_t b) { return static_cast<double>(b) / (1ULL << 30); };
  const long long memory = available_memory_bytes();
  const std::string shape = detail::concat("the requested shape (hidden_size ", o.shape.hidden_size, ", intermediate_size ",
                                           o.shape.intermediate_size, ", num_hidden_layers ", o.shape.num_hidden_layers,
                                           ", vocab_size ", o.shape.vocab_size, ", ", dtype_name(o.dtype), ")");
  SPECULA_CHECK(largest <= static_cast<uint64_t>(memory), shape, ": its largest tensor needs ", gib(largest),
                " GiB of memory to write, more than the ", gib(memory), " GiB available");

  const bool created = !fs::exists(dir);
  fs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.model"})
    SPECULA_CHECK(!fs::exists(fs::path(dir) / file), dir, " already holds ", file,
                  "; choose an empty folder (nothing is overwritten)");
  try {
    const uint64_t free_bytes = fs::space(dir).available;
    SPECULA_CHECK(total <= free_bytes, shape, " needs ", gib(total), " GiB, more than the ", gib(free_bytes), " GiB free in ",
                  dir);
    write_checkpoint_files(dir, o, config_text, tensors);
  } catch (...) {  // no partial checkpoint stays behind to block the next try
    std::error_code ignored;
    if (created) {
      fs::remove_all(dir, ignored);
    } else {
      for (const char* file : {"config.json", "model.safetensors", "tokenizer.model"}) fs::remove(fs::path(dir) / file, ignored);
    }
    throw;
  }
}

}  // namespace specula
