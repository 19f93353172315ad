// The checkpoint writer: safetensors files it writes read back byte for byte through the
// loader, random checkpoints of a given shape load as models and run, their bytes depend on
// the seed alone, their weights have the stated distribution, a vocabulary padded past the
// tokenizer's pieces works, the named shapes match the bundled models, bad requests fail
// before anything is written, and a write that fails half-way leaves no partial checkpoint.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <csignal>
#include <sys/resource.h>
#include <vector>

#include "model/checkpoint_writer.h"
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
using test::TempDir;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small GQA shape over the bundled 4096-piece tokenizer.
ModelConfig small_shape() {
  ModelConfig c = preset_shape("target-16m");
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.num_hidden_layers = 2;
  return c;
}

RandomCheckpoint small_checkpoint(DType dtype, uint64_t seed) {
  return {small_shape(), dtype, seed, test::model_dir("target-16m") + "/tokenizer.model"};
}

// Caps the size of any file this process writes (RLIMIT_FSIZE) while it lives; SIGXFSZ is
// ignored so that a write past the cap fails with EFBIG instead of killing the process.
class FileSizeCap {
 public:
  explicit FileSizeCap(rlim_t bytes) : old_signal_(std::signal(SIGXFSZ, SIG_IGN)) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_) == 0);
    rlimit capped = old_;
    capped.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &capped) == 0);
  }
  ~FileSizeCap() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_signal_);
  }
  FileSizeCap(const FileSizeCap&) = delete;
  FileSizeCap& operator=(const FileSizeCap&) = delete;

 private:
  rlimit old_{};
  void (*old_signal_)(int);
};

}  // namespace

TEST_CASE("write_safetensors: every tensor reads back byte for byte, data 8-byte aligned", "[engine][writer]") {
  TempDir dir;
  const std::vector<TensorSpec> specs = {
      {"a", DType::F32, {3, 5}}, {"b", DType::BF16, {7}}, {"c", DType::F16, {2, 3, 4}}};
  const auto pattern = [](std::size_t index, std::size_t i) { return static_cast<unsigned char>(31 * index + 7 * i); };
  write_safetensors(dir.file("t.safetensors"), specs, [&](std::size_t index, std::span<unsigned char> bytes) {
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(index, i);
  });
  uint64_t header_length = 0;
  std::memcpy(&header_length, file_bytes(dir.file("t.safetensors")).data(), 8);
  CHECK((8 + header_length) % 8 == 0);
  const SafetensorsFile file(dir.file("t.safetensors"));
  for (std::size_t index = 0; index < specs.size(); ++index) {
    const TensorView& t = file.tensors().at(specs[index].name);
    CHECK(t.dtype == specs[index].dtype);
    CHECK(t.shape == specs[index].shape);
    const auto* data = static_cast<const unsigned char*>(t.data);
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < bytes; ++i) mismatches += data[i] != pattern(index, i);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("random checkpoint: loads as a model of its shape and runs, for every dtype", "[engine][writer]") {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    INFO(dtype_name(dtype));
    TempDir dir;
    write_random_checkpoint(dir.path.string(), small_checkpoint(dtype, 1));
    Model m(dir.path.string());
    const auto backend = make_backend(BackendKind::kCpu, m, std::nullopt);
    const ModelConfig& c = m.config();
    CHECK(c.hidden_size == 64);
    CHECK(c.num_key_value_heads == 2);
    CHECK(c.num_hidden_layers == 2);
    CHECK(backend->weight_bytes() > 0);
    test::Engine e(*backend, 16, 4);
    KvCache& cache = e.cache;
    const int seq = cache.create();
    const std::vector<int> tokens = {1, 450, 22, 9};
    std::vector<int> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
    e.forward(seq, {tokens, positions, {}, false}, logits);
    CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
    CHECK(*std::max_element(logits.begin(), logits.end()) > *std::min_element(logits.begin(), logits.end()));
    cache.free(seq);
  }
}

TEST_CASE("random checkpoint: the bytes depend on the seed alone — weights have std 0.02, norms 1",
          "[engine][writer]") {
  TempDir a, b, c;
  write_random_checkpoint(a.path.string(), small_checkpoint(DType::F32, 7));
  write_random_checkpoint(b.path.string(), small_checkpoint(DType::F32, 7));
  write_random_checkpoint(c.path.string(), small_checkpoint(DType::F32, 8));
  CHECK(file_bytes(a.file("model.safetensors")) == file_bytes(b.file("model.safetensors")));
  CHECK(file_bytes(a.file("model.safetensors")) != file_bytes(c.file("model.safetensors")));

  const SafetensorsFile file(a.file("model.safetensors"));
  const TensorView& embed = file.tensors().at("model.embed_tokens.weight");  // 4096 x 64 = 262,144 values
  const auto* v = static_cast<const float*>(embed.data);
  const std::size_t n = static_cast<std::size_t>(embed.numel());
  double sum = 0, sum_sq = 0, largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += v[i];
    sum_sq += double(v[i]) * v[i];
    largest = std::max(largest, std::abs(double(v[i])));
  }
  const double mean = sum / n, std_dev = std::sqrt(sum_sq / n - mean * mean);
  // Uniform on [-a, a], a = 0.02 sqrt(3): the sample mean's standard error is 0.02 / sqrt(n)
  // = 3.9e-5 (bound: 6 of them); the sample std's is about 0.02 * 0.45 / sqrt(n) = 1.8e-5.
  CHECK(std::abs(mean) < 6 * 0.02 / std::sqrt(double(n)));
  CHECK(std::abs(std_dev - 0.02) < 2e-4);
  CHECK(largest <= 0.02 * std::sqrt(3.0));
  const TensorView& norm = file.tensors().at("model.layers.1.input_layernorm.weight");
  const auto* g = static_cast<const float*>(norm.data);
  CHECK(std::all_of(g, g + norm.numel(), [](float x) { return x == 1.0f; }));
}

TEST_CASE("random checkpoint: a vocabulary padded past the tokenizer's pieces decodes padding to no text",
          "[engine][writer]") {
  TempDir dir;
  RandomCheckpoint o = small_checkpoint(DType::BF16, 2);
  o.shape.vocab_size = 4160;  // 64 padding rows, as checkpoints padded to a multiple of 64 have
  write_random_checkpoint(dir.path.string(), o);
  const Model m(dir.path.string());
  const Tokenizer& tok = m.tokenizer();
  CHECK(tok.piece_count() == 4096);
  CHECK(tok.vocab_size() == 4160);
  const std::vector<int> hello = tok.encode("hello world", false);
  std::vector<int> padded = hello;
  padded.insert(padded.begin() + 1, 4100);
  CHECK(tok.decode(padded) == tok.decode(hello));
  CHECK(tok.decode_piece(hello, 4159).empty());
  CHECK_THROWS_WITH(tok.decode({4160}), Contains("id 4160 is outside the vocabulary"));
}

TEST_CASE("random checkpoint: the named shapes are the bundled models' shapes", "[engine][writer]") {
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) {
    INFO(name);
    const ModelConfig p = preset_shape(name), m = load_model_config(test::model_dir(name) + "/config.json");
    CHECK(p.hidden_size == m.hidden_size);
    CHECK(p.intermediate_size == m.intermediate_size);
    CHECK(p.num_attention_heads == m.num_attention_heads);
    CHECK(p.num_key_value_heads == m.num_key_value_heads);
    CHECK(p.num_hidden_layers == m.num_hidden_layers);
    CHECK(p.vocab_size == m.vocab_size);
    CHECK(p.max_position_embeddings == m.max_position_embeddings);
    CHECK(p.tie_word_embeddings == m.tie_word_embeddings);
  }
  const ModelConfig tiny = preset_shape("tinyllama-1.1b");
  CHECK(tiny.hidden_size == 2048);
  CHECK(tiny.num_hidden_layers == 22);
  CHECK(tiny.vocab_size == 32000);
  CHECK_THROWS_WITH(preset_shape("llama-70b"), Contains("unknown shape preset 'llama-70b'") && Contains("tinyllama-1.1b"));
}

TEST_CASE("random checkpoint: each family's preset writes a config.json that reads back as that family",
          "[engine][writer]") {
  for (const char* name : {"llama3", "qwen2", "qwen3", "mistral", "llama3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b"}) {
    INFO(name);
    const ModelConfig p = preset_shape(name);
    const ModelConfig back = parse_model_config(checkpoint_config_json(p, DType::BF16), name);
    CHECK(back.family == p.family);
    CHECK(back.head_dim() == p.head_dim());
    CHECK(back.attention_bias == p.attention_bias);
    CHECK(back.o_bias == p.o_bias);
    CHECK(back.mlp_bias == p.mlp_bias);
    CHECK(back.qk_norm == p.qk_norm);
    CHECK(back.sliding_window == p.sliding_window);
    CHECK(back.rope_scaling.type == p.rope_scaling.type);
    CHECK(back.rope_scaling.factor == p.rope_scaling.factor);
    CHECK(back.rope_theta == p.rope_theta);
  }
  const ModelConfig qwen3 = preset_shape("qwen3-0.6b");  // 16 heads of 128 over hidden 1024
  CHECK(qwen3.q_dim() == 2048);
  CHECK(qwen3.hidden_size == 1024);
  CHECK(preset_shape("qwen2.5-0.5b").attention_bias);
  CHECK(preset_shape("llama3.2-1b").rope_scaling.original_max_position_embeddings == 8192);
}

TEST_CASE("random checkpoint: bad requests fail before anything is written, and nothing is overwritten",
          "[engine][writer]") {
  TempDir dir;
  const fs::path fresh = dir.path / "fresh";
  RandomCheckpoint bad_heads = small_checkpoint(DType::BF16, 0);
  bad_heads.shape.num_attention_heads = 5;
  CHECK_THROWS_WITH(write_random_checkpoint(fresh.string(), bad_heads),
                    Contains("'num_attention_heads' (5) must divide 'hidden_size' (64)"));
  RandomCheckpoint small_vocab = small_checkpoint(DType::BF16, 0);
  small_vocab.shape.vocab_size = 1000;
  CHECK_THROWS_WITH(write_random_checkpoint(fresh.string(), small_vocab),
                    Contains("4096 pieces do not fit the model's vocab_size = 1000"));
  CHECK_FALSE(fs::exists(fresh));

  write_random_checkpoint(fresh.string(), small_checkpoint(DType::BF16, 0));
  const std::string before = file_bytes((fresh / "model.safetensors").string());
  CHECK_THROWS_WITH(write_random_checkpoint(fresh.string(), small_checkpoint(DType::BF16, 1)),
                    Contains("already holds config.json"));
  CHECK(file_bytes((fresh / "model.safetensors").string()) == before);
}

TEST_CASE("random checkpoint: a write that fails half-way removes what it wrote, and only that", "[engine][writer]") {
  const RandomCheckpoint request = small_checkpoint(DType::F32, 1);
  // The cap lets tokenizer.model and config.json through and stops model.safetensors part-way.
  const rlim_t cap = static_cast<rlim_t>(fs::file_size(request.tokenizer_model)) + 4096;
  REQUIRE(static_cast<rlim_t>(request.shape.vocab_size) * request.shape.hidden_size * 4 > 2 * cap);
  TempDir root;
  const fs::path fresh = root.path / "fresh";  // a folder the writer creates: removed whole
  const fs::path existing = root.path / "existing";  // a folder that was there: keeps its own files
  fs::create_directories(existing);
  { std::ofstream(existing / "notes.txt") << "kept"; }
  {
    const FileSizeCap capped(cap);
    CHECK_THROWS_WITH(write_random_checkpoint(fresh.string(), request), Contains("model.safetensors") && Contains("write failed"));
    CHECK_THROWS_WITH(write_random_checkpoint(existing.string(), request), Contains("write failed"));
  }
  CHECK_FALSE(fs::exists(fresh));
  CHECK(fs::exists(existing / "notes.txt"));
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.model"}) CHECK_FALSE(fs::exists(existing / file));
  write_random_checkpoint(existing.string(), request);  // the next try is not blocked
  CHECK(fs::exists(existing / "model.safetensors"));
}

}  // namespace specula
