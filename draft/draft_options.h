// defines: DraftMethod (none, model, ngram) and DraftOptions, the settings of a drafter (draft
// model chain / static tree / dynamic tree, n-gram lookup), as the CLI and experiment configs
// give them; the spelling of a model's weight format ("stored", a dtype name, "int8" or "bf16dot").
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/enum_names.h"

namespace specula {

enum class DraftMethod { kNone, kModel, kNgram };

inline std::span<const EnumName<DraftMethod>> enum_names(DraftMethod) {
  static constexpr EnumName<DraftMethod> kNames[] = {
      {DraftMethod::kNone, "none"}, {DraftMethod::kModel, "model"}, {DraftMethod::kNgram, "ngram"}};
  return kNames;
}

struct DraftOptions {
  DraftMethod method = DraftMethod::kNone;
  std::string model_dir;              // for method = model
  std::optional<DType> weights;       // the dtype the draft's matrices are read in (I8: int8, BF16Dot: bf16dot, BF16Amx: bf16amx); nullopt = as stored
  int gamma = 4;                      // chain length (and n-gram proposal length)
  std::vector<int> tree;              // static tree branching, e.g. {3,2,1,1}; empty = chain
  int tree_budget = 0;                // > 0: dynamic tree with this many nodes
  int siblings = 0;                   // fixed-length draft-model chains: other candidates for the first token (DraftBound::siblings)
  int ngram_min = 1;
  int ngram_max = 3;
  bool adaptive = false;              // adaptive chain length

  // The drafter proposes a chain: neither a static (`tree`) nor a dynamic (`tree_budget`) tree.
  bool drafts_chain() const { return tree.empty() && tree_budget == 0; }
};

// "stored", "f32", "f16", "bf16", "int8" (I8: quantised at load, engine/cpu/packed_int8.h) or
// "bf16dot" (BF16Dot: BF16 weights times activations rounded to BF16, engine/cpu/matmul_bf16dot.h)
// or "bf16amx" (BF16Amx: the same operands through AMX's tile product, engine/cpu/matmul_bf16amx.h).
std::string weights_name(std::optional<DType> weights);
// The inverse of weights_name (dtype names in any case); false for anything else.
inline constexpr const char* kWeightsSpellings = "stored, f32, f16, bf16, int8, bf16dot or bf16amx";
bool parse_weights(std::string_view text, std::optional<DType>& weights);

}  // namespace specula
