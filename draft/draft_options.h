// defines: DraftOptions, the settings of a drafter (draft model chain / static tree / dynamic
// tree, n-gram lookup), as the CLI and experiment configs give them.
#pragma once

#include <string>
#include <vector>

namespace specula {

struct DraftOptions {
  std::string method = "none";  // none | model | ngram
  std::string model_dir;        // for method = model
  std::string weights = "stored";  // stored | f32 | f16 | bf16: the dtype the draft's matrices are read in
  int gamma = 4;                // chain length (and n-gram proposal length)
  std::vector<int> tree;        // static tree branching, e.g. {3,2,1,1}; empty = chain
  int tree_budget = 0;          // > 0: dynamic tree with this many nodes
  int ngram_min = 1;
  int ngram_max = 3;
  bool adaptive = false;        // adaptive chain length
};

}  // namespace specula
