#include "model/medusa_model.h"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "model/json_object.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// j[key] as a positive int; `fallback` when absent or null (0: the key is required).
int positive_int(const json& j, const char* key, const std::string& origin, int fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    SPECULA_CHECK(fallback > 0, origin, ": key '", key, "' is missing");
    return fallback;
  }
  SPECULA_CHECK(it->is_number_integer() && it->get<int64_t>() > 0 &&
                    it->get<int64_t>() <= std::numeric_limits<int>::max(),
                origin, ": key '", key, "' must be a positive integer, got ", it->dump());
  return it->get<int>();
}

}  // namespace

MedusaModel::MedusaModel(const std::string& dir, const ModelConfig& target) : dir_(dir) {
  const fs::path d(dir);
  const std::string origin = (d / "config.json").string();
  const json j = read_json_object(origin);
  MedusaConfig& c = config_;
  // A folder of another kind, by what its config says, before the Medusa keys are read.
  if (!j.contains("medusa_num_heads")) {
    const std::string other = j.contains("speculators_model_type")
                                  ? "key 'speculators_model_type' = " + j["speculators_model_type"].dump()
                              : j.contains("architectures") ? "key 'architectures' = " + j["architectures"].dump()
                                                            : "";
    SPECULA_CHECK(other.empty(), origin, ": not a Medusa head (", other,
                  ", no 'medusa_num_heads'); EAGLE heads load with draft.method eagle3 or eagle "
                  "(--draft-method eagle3|eagle)");
  }
  c.num_heads = positive_int(j, "medusa_num_heads", origin, 0);
  c.num_layers = positive_int(j, "medusa_num_layers", origin, 0);
  c.hidden_size = positive_int(j, "hidden_size", origin, target.hidden_size);
  c.vocab_size = positive_int(j, "vocab_size", origin, target.vocab_size);
  SPECULA_CHECK(c.hidden_size == target.hidden_size, origin, ": key 'hidden_size' = ", c.hidden_size,
                " differs from the target's hidden_size ", target.hidden_size);
  SPECULA_CHECK(c.vocab_size == target.vocab_size, origin, ": key 'vocab_size' = ", c.vocab_size,
                " differs from the target's vocab_size ", target.vocab_size);

  if (!fs::exists(d / "model.safetensors") && !fs::exists(d / "model.safetensors.index.json")) {
    for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json", "medusa_lm_head.pt"}) {
      SPECULA_CHECK(!fs::exists(d / pickle), (d / pickle).string(),
                    ": PyTorch pickle weights are not read; convert them to safetensors (model.safetensors, e.g. "
                    "with tools/heads/ in this repository, or safetensors.torch.save_file(torch.load(path), "
                    "'model.safetensors'))");
    }
    throw SpeculaError(detail::concat(dir, ": no model.safetensors or model.safetensors.index.json"));
  }
  checkpoint_ = std::make_unique<Checkpoint>(dir);
  const Checkpoint& ck = *checkpoint_;
  const int64_t hidden = c.hidden_size, vocab = c.vocab_size;
  std::set<std::string> used;
  const auto get = [&](const std::string& name, const std::vector<int64_t>& shape) {
    SPECULA_CHECK(ck.contains(name), dir, ": tensor '", name, "' is missing (", origin, ": medusa_num_heads ",
                  c.num_heads, ", medusa_num_layers ", c.num_layers, ")");
    used.insert(name);
    return &ck.get(name, shape);
  };
  heads_.resize(static_cast<std::size_t>(c.num_heads));
  for (int i = 0; i < c.num_heads; ++i) {
    Head& h = heads_[static_cast<std::size_t>(i)];
    const std::string p = "medusa_head." + std::to_string(i) + ".";
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string b = p + std::to_string(l) + ".linear.";
      h.blocks.push_back({get(b + "weight", {hidden, hidden}), get(b + "bias", {hidden})});
    }
    h.lm_head = get(p + std::to_string(c.num_layers) + ".weight", {vocab, hidden});
  }
  for (const auto& [name, tensor] : ck.tensors())
    SPECULA_CHECK(used.count(name) != 0, tensor->origin, ": unknown tensor '", name, "': Medusa heads of ", origin,
                  " (medusa_num_heads ", c.num_heads, ", medusa_num_layers ", c.num_layers, ") do not use it");
}

}  // namespace specula
