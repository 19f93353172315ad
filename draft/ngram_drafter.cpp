#include "draft/ngram_drafter.h"

#include <algorithm>

namespace specula {

void NgramDrafter::start(std::span<const int> committed, int max_depth, Philox&) {
  proposer_.append(committed.subspan(proposer_.context().size()));
  const TokenTree chain = proposer_.propose();
  const int keep = std::min(chain.size(), std::max(max_depth, 0));
  proposal_ = {TokenTree::chain(std::span(chain.tokens).first(keep), SiblingDraw::kTopK), {}};
}

}  // namespace specula
