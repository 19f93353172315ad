// defines: DraftMethod (none, model, ngram, eagle3, eagle, medusa) and DraftOptions, the settings of a drafter (draft
// model chain / static tree / dynamic tree, n-gram lookup), as the CLI and experiment configs
// give them; the spelling of a model's weight format ("stored" or a MatrixFormat name).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "engine/matrix_format.h"

namespace specula {

// eagle3, eagle: an EAGLE-3 or EAGLE-1 head on the target's hidden states
// (draft/head_drafter.h), its folder in model_dir. medusa: Medusa heads on the target's last
// hidden state (draft/medusa_drafter.h), likewise.
enum class DraftMethod { kNone, kModel, kNgram, kEagle3, kEagle, kMedusa };

// eagle3 or eagle: a HeadDrafter's method.
inline bool drafts_with_eagle_head(DraftMethod method) {
  return method == DraftMethod::kEagle3 || method == DraftMethod::kEagle;
}

inline std::span<const EnumName<DraftMethod>> enum_names(DraftMethod) {
  static constexpr EnumName<DraftMethod> kNames[] = {
      {DraftMethod::kNone, "none"}, {DraftMethod::kModel, "model"}, {DraftMethod::kNgram, "ngram"},
      {DraftMethod::kEagle3, "eagle3"}, {DraftMethod::kEagle, "eagle"}, {DraftMethod::kMedusa, "medusa"}};
  return kNames;
}

struct DraftOptions {
  DraftMethod method = DraftMethod::kNone;
  std::string model_dir;              // for method = model (the draft model), eagle3, eagle and medusa (the head)
  std::optional<MatrixFormat> weights;  // the format the draft's matrices are read in; nullopt = as stored
  int gamma = 4;                      // chain length (and n-gram proposal length)
  std::vector<int> tree;              // static tree branching, e.g. {3,2,1,1}; empty = chain
  int tree_budget = 0;                // > 0: dynamic tree (or with `sequoia`, a Sequoia tree) of this many nodes
  // Non-empty: [depth - 1][sibling rank] acceptance probabilities the static tree of
  // tree_budget nodes is chosen for (draft/sequoia_tree.h).
  std::vector<std::vector<double>> sequoia;
  int siblings = 0;                   // fixed-length draft-model chains: other candidates for the first token (DraftBound::siblings)
  int ngram_min = 1;
  int ngram_max = 3;
  bool adaptive = false;              // adaptive chain length

  // The drafter proposes a chain: neither a static (`tree`) nor a dynamic (`tree_budget`) tree.
  bool drafts_chain() const { return tree.empty() && tree_budget == 0; }
  bool dynamic_tree() const { return tree_budget > 0 && sequoia.empty(); }
};

// "stored" for nullopt, else the format's name (engine/matrix_format.h).
std::string weights_name(std::optional<MatrixFormat> weights);
// The inverse of weights_name (dtype names in any case, "BF16" as "bf16"); false for anything else.
bool parse_weights(std::string_view text, std::optional<MatrixFormat>& weights);
// Every weights_name, "stored" first: as a list, and as "stored, f32, ... or bf16amx".
std::vector<std::string> weights_spellings();
std::string weights_choices();

}  // namespace specula
