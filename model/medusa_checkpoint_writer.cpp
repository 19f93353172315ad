#include "model/medusa_checkpoint_writer.h"

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "model/checkpoint_writer.h"

namespace specula {

void write_random_medusa(const std::string& dir, const ModelConfig& target, const RandomMedusa& o) {
  namespace fs = std::filesystem;
  SPECULA_CHECK(o.num_heads > 0 && o.num_layers >= 0, "Medusa heads need num_heads > 0 and num_layers >= 0, got ",
                o.num_heads, " and ", o.num_layers);
  SPECULA_CHECK(o.weight_std > 0, "the weights' standard deviation must be positive, got ", o.weight_std);
  const int64_t hidden = target.hidden_size, vocab = target.vocab_size;
  std::vector<TensorSpec> specs;
  std::vector<uint64_t> streams;  // each tensor's Philox stream: head, block, kind
  for (int i = 0; i < o.num_heads; ++i) {
    const std::string p = "medusa_head." + std::to_string(i) + ".";
    for (int l = 0; l < o.num_layers; ++l) {
      specs.push_back({p + std::to_string(l) + ".linear.weight", o.dtype, {hidden, hidden}});
      streams.push_back((uint64_t(i) << 32) | (uint64_t(l) << 2));
      specs.push_back({p + std::to_string(l) + ".linear.bias", o.dtype, {hidden}});
      streams.push_back((uint64_t(i) << 32) | (uint64_t(l) << 2) | 1);
    }
    specs.push_back({p + std::to_string(o.num_layers) + ".weight", o.dtype, {vocab, hidden}});
    streams.push_back((uint64_t(i) << 32) | (uint64_t(o.num_layers) << 2) | 2);
  }

  fs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors"})
    SPECULA_CHECK(!fs::exists(fs::path(dir) / file), dir, " already holds ", file,
                  "; choose an empty folder (nothing is overwritten)");
  {
    const nlohmann::json j = {{"medusa_num_heads", o.num_heads},
                              {"medusa_num_layers", o.num_layers},
                              {"hidden_size", target.hidden_size},
                              {"vocab_size", target.vocab_size},
                              {"base_model_name_or_path", "random"}};
    std::ofstream out(fs::path(dir) / "config.json");
    out << j.dump(2) << '\n';
    SPECULA_CHECK(out.good(), dir, "/config.json: write failed");
  }
  const float half_width = o.weight_std * std::sqrt(3.0f);  // uniform with standard deviation weight_std
  write_safetensors((fs::path(dir) / "model.safetensors").string(), specs,
                    [&](std::size_t index, std::span<unsigned char> bytes) {
                      const std::size_t es = dtype_size(o.dtype);
                      const Philox rng(o.seed, streams[index]);
                      std::array<uint32_t, 4> block{};
                      for (std::size_t i = 0; i < bytes.size() / es; ++i) {
                        if (i % 4 == 0) block = rng.block(i / 4);
                        // 24 random bits of the block's lane i % 4 -> uniform in [-1, 1).
                        const float u = 2.0f * static_cast<float>(block[i % 4] >> 8) / 16777216.0f - 1.0f;
                        store_value(half_width * u, o.dtype, &bytes[i * es]);
                      }
                    });
}

}  // namespace specula
