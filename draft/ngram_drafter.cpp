#include "draft/ngram_drafter.h"

#include <algorithm>

namespace specula {

void NgramDrafter::learn(std::span<const int> committed) {
  proposer_.append(committed.subspan(proposer_.context().size()));
}

const TokenTree& NgramDrafter::lookup() {
  const std::size_t length = proposer_.context().size();
  if (length == 0 || length != looked_up_at_) {
    looked_up_ = proposer_.propose();
    looked_up_at_ = length;
  }
  return looked_up_;
}

int NgramDrafter::proposal_limit(std::span<const int> committed) {
  learn(committed);
  return lookup().size();
}

void NgramDrafter::start(std::span<const int> committed, DraftBound bound, Philox&) {
  learn(committed);
  const TokenTree& chain = lookup();
  const int keep = std::min(chain.size(), std::max(bound.max_depth, 0));
  proposal_ = Proposal();
  proposal_.tree = TokenTree::chain(std::span(chain.tokens).first(keep), SiblingDraw::kTopK);
}

}  // namespace specula
