// defines: NgramDrafter, the n-gram / prompt-lookup proposer behind the Drafter
// interface: it learns committed tokens as they arrive and proposes point-mass chains.
#pragma once

#include "draft/drafter.h"
#include "draft/ngram_proposer.h"

namespace specula {

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(NgramConfig config) : proposer_(config) {}

  void start(std::span<const int> committed, DraftBound bound, Philox& rng) override;
  int proposal_limit(std::span<const int> committed) override;
  Proposal take_proposal() override { return std::move(proposal_); }
  void accept(const TokenTree&, std::span<const int>, std::span<const int>) override {}

 private:
  void learn(std::span<const int> committed);  // appends what the proposer's context lacks
  // The proposer's chain after its context as it is: looked up once per context length
  // (proposal_limit and the start after it ask about the same context).
  const TokenTree& lookup();

  NgramProposer proposer_;
  Proposal proposal_;
  TokenTree looked_up_;
  std::size_t looked_up_at_ = 0;  // the context length looked_up_ is for (0: none yet)
};

}  // namespace specula
