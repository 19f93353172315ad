#include "engine/checkpoint_writer.h"

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/tokenizer.h"
#include "base/rng.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

int64_t numel(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                       const std::function<void(std::size_t, std::span<unsigned char>)>& fill) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(numel(t)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
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
    bytes.assign(static_cast<std::size_t>(numel(tensors[i])) * dtype_size(tensors[i].dtype), 0);
    fill(i, bytes);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  out.close();
  SPECULA_CHECK(!out.fail(), path, ": write failed (disk full?)");
}

std::vector<TensorSpec> llama_tensors(const ModelConfig& c, DType dtype) {
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size, kv = c.kv_dim(), vocab = c.vocab_size;
  std::vector<TensorSpec> t = {{"model.embed_tokens.weight", dtype, {vocab, hidden}}};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", dtype, {hidden}});
    t.push_back({p + "self_attn.q_proj.weight", dtype, {hidden, hidden}});
    t.push_back({p + "self_attn.k_proj.weight", dtype, {kv, hidden}});
    t.push_back({p + "self_attn.v_proj.weight", dtype, {kv, hidden}});
    t.push_back({p + "self_attn.o_proj.weight", dtype, {hidden, hidden}});
    t.push_back({p + "post_attention_layernorm.weight", dtype, {hidden}});
    t.push_back({p + "mlp.gate_proj.weight", dtype, {ffn, hidden}});
    t.push_back({p + "mlp.up_proj.weight", dtype, {ffn, hidden}});
    t.push_back({p + "mlp.down_proj.weight", dtype, {hidden, ffn}});
  }
  t.push_back({"model.norm.weight", dtype, {hidden}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", dtype, {vocab, hidden}});
  return t;
}

std::string llama_config_json(const ModelConfig& c, DType dtype) {
  const char* torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  const nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                            {"model_type", "llama"},
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
                            {"eos_token_id", c.eos_token_id},
                            {"torch_dtype", torch_dtype},
                            {"initializer_range", 0.02}};
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
  const Preset presets[] = {{"tinyllama-1.1b", shape(2048, 5632, 32, 4, 22, 32000, 2048, false)},
                            {"target-16m", shape(384, 1024, 6, 2, 8, 4096, 2048, false)},
                            {"draft-4m", shape(256, 768, 4, 4, 4, 4096, 2048, true)},
                            {"draft-1m", shape(128, 384, 2, 2, 2, 4096, 2048, true)}};
  std::string known;
  for (const Preset& p : presets) {
    if (name == p.name) return p.shape;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  throw SpeculaError(detail::concat("unknown shape preset '", name, "' (known: ", known, ")"));
}

void write_random_checkpoint(const std::string& dir, const RandomCheckpoint& o) {
  const std::string config_text = llama_config_json(o.shape, o.dtype);
  parse_model_config(config_text, "the requested shape");  // names the offending key
  const Tokenizer tokenizer(o.tokenizer_model, o.shape.vocab_size);  // the pieces must fit

  fs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.model"})
    SPECULA_CHECK(!fs::exists(fs::path(dir) / file), dir, " already holds ", file,
                  "; choose an empty folder (nothing is overwritten)");
  fs::copy_file(o.tokenizer_model, fs::path(dir) / "tokenizer.model");
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << config_text << '\n';
    SPECULA_CHECK(out.good(), dir, "/config.json: write failed");
  }
  const std::vector<TensorSpec> tensors = llama_tensors(o.shape, o.dtype);
  const float half_width = 0.02f * std::sqrt(3.0f);  // uniform with standard deviation 0.02
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                    [&](std::size_t index, std::span<unsigned char> bytes) {
                      const TensorSpec& t = tensors[index];
                      const std::size_t es = dtype_size(t.dtype);
                      const bool norm = t.shape.size() == 1;
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

}  // namespace specula
