// defines: draw_siblings, the children of one draft context drawn from the draft
// distribution q in one of the three SiblingDraw modes the verifier knows how to check.
// Greedy drafting is kTopK with as many children as wanted (one for a chain).
#pragma once

#include <span>
#include <vector>

#include "base/rng.h"
#include "verify/token_tree.h"

namespace specula {

// q: in [vocab], the draft's next-token distribution (the sampler's transform of the
// draft logits; sums to 1 up to rounding). Returns the children's tokens in the order the
// verifier must try them:
//   kSampled:            k i.i.d. draws from q (duplicates possible), one uniform each;
//   kWithoutReplacement: k sequential draws, each from q with the earlier ones removed and
//                        renormalised, one uniform each; fewer than k once q is exhausted;
//   kTopK:               the k most probable tokens, most probable first, ties to the
//                        lowest id; no uniforms; only tokens with q > 0, so possibly fewer.
// Draws are inverse-CDF (Residual::sample) with rng.uniform(). k must be >= 0. `exclude`: a
// token never drawn, as if q held it at 0 (-1: none): the children after one already drawn.
std::vector<int> draw_siblings(std::span<const float> q, int k, SiblingDraw mode, Philox& rng, int exclude = -1);

}  // namespace specula
