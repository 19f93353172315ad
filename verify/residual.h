// defines: Residual, one next-token distribution under the updates speculative sampling
// makes to it (remove a token; r <- norm(max(r - q, 0))), and the inverse-CDF draw that
// the verifier and the sibling drawer share.
//
// A Residual starts as a view of a probability row (no copy: the common path of a
// verification touches one entry per node). remove() keeps it a view plus a sorted list of
// removed tokens; subtract() materialises the weights in double. Weights are unnormalised;
// probability = weight / mass.
#pragma once

#include <span>
#include <vector>

namespace specula {

class Residual {
 public:
  // `row`: in [vocab], a probability distribution (sums to 1 up to float rounding; the
  // initial mass is taken to be exactly 1). The row must outlive the Residual.
  explicit Residual(std::span<const float> row) : row_(row) {}
  // A residual that owns `weights` (unnormalised, each >= 0): mass = their sum.
  static Residual from_weights(std::vector<double> weights);

  int vocab() const { return static_cast<int>(dense_.empty() ? row_.size() : dense_.size()); }
  double mass() const { return mass_; }
  double weight(int token) const;

  // weight(token) <- 0 (nothing if it is 0 already).
  void remove(int token);
  // this <- max(this / mass - q / q.mass, 0), then mass = the sum of the new weights.
  // Nothing happens when either mass is 0 (the update is undefined there).
  void subtract(const Residual& q);

  // The smallest token t with sum_{v <= t} weight(v) > u * total() (prefix sums in double,
  // in token order). When rounding leaves no such t, the last token of positive weight. -1 if
  // total() is 0. u: in [0, 1).
  int sample(double u) const;

 private:
  // The sum of all weights in double, in an order that vectorises (while the residual is a
  // view: the row's sum less the removed tokens' weights): summed in token order, one add
  // waiting on the last, sample() would cost twice the plain sampler's draw
  // (docs/measurements.md, Residual sampling).
  double total() const;
  // Calls visit(token, weight) for every token in order until visit returns false.
  template <typename Visit>
  void for_each_weight(Visit visit) const;

  std::span<const float> row_;
  std::vector<double> dense_;  // [vocab] materialised weights once subtract() ran (or owned), else empty
  std::vector<int> removed_;   // sorted tokens removed from row_ (used only while dense_ is empty)
  double mass_ = 1.0;
};

}  // namespace specula
