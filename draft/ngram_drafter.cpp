#include "draft/ngram_drafter.h"

#include <algorithm>

namespace specula {

void NgramDrafter::learn(std::span<const int> committed) {
  proposer_.append(committed.subspan(proposer_.context().size()));
}

int NgramDrafter::proposal_limit(std::span<const int> committed) {
  learn(committed);
  return proposer_.propose().size();
}

void NgramDrafter::start(std::span<const int> committed, DraftBound bound, Philox&) {
  learn(committed);
  const TokenTree chain = proposer_.propose();
  const int keep = std::min(chain.size(), std::max(bound.max_depth, 0));
  proposal_ = {TokenTree::chain(std::span(chain.tokens).first(keep), SiblingDraw::kTopK), {}};
}

}  // namespace specula
