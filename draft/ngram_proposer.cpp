#include "draft/ngram_proposer.h"

#include <algorithm>

#include "base/error.h"

namespace specula {

NgramProposer::NgramProposer(NgramConfig config) : config_(config) {
  SPECULA_CHECK(config.n_min >= 1, "--ngram-min must be >= 1, got ", config.n_min);
  SPECULA_CHECK(config.n_max >= config.n_min, "--ngram-max (", config.n_max, ") must be >= --ngram-min (", config.n_min,
                ")");
  SPECULA_CHECK(config.gamma >= 1, "--gamma must be >= 1, got ", config.gamma);
  last_end_.resize(config.n_max - config.n_min + 1);
}

uint64_t NgramProposer::hash(int end, int n) const {
  uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(n);
  for (int i = end - n + 1; i <= end; ++i) {
    h ^= static_cast<uint32_t>(context_[i]);
    h *= 0xBF58476D1CE4E5B9ull;  // splitmix64 finaliser steps
    h ^= h >> 31;
  }
  return h;
}

void NgramProposer::append(std::span<const int> tokens) {
  for (int token : tokens) {
    context_.push_back(token);
    // The n-grams ending just before the new token now have a follower: index them.
    const int end = static_cast<int>(context_.size()) - 2;
    for (int n = config_.n_min; n <= config_.n_max && n <= end + 1; ++n)
      last_end_[n - config_.n_min][hash(end, n)] = end;
  }
}

void NgramProposer::reset() {
  context_.clear();
  for (auto& index : last_end_) index.clear();
}

TokenTree NgramProposer::propose() const {
  const int length = static_cast<int>(context_.size());
  for (int n = std::min(config_.n_max, length - 1); n >= config_.n_min; --n) {
    const auto& index = last_end_[n - config_.n_min];
    const auto found = index.find(hash(length - 1, n));
    if (found == index.end()) continue;
    const int e = found->second;
    // A hash collision names another n-gram: fall through to shorter n.
    if (!std::equal(context_.begin() + (e - n + 1), context_.begin() + (e + 1), context_.end() - n)) continue;
    std::vector<int> proposal;
    for (int k = 0; k < config_.gamma; ++k) {
      const int source = e + 1 + k;  // index into context_ followed by proposal
      proposal.push_back(source < length ? context_[source] : proposal[source - length]);
    }
    return TokenTree::chain(proposal, SiblingDraw::kTopK);
  }
  return TokenTree(SiblingDraw::kTopK);
}

}  // namespace specula
