// defines: CostFit (seconds of a step as a function of its rows, measured at run time: a
// smoothed figure per row count seen, interpolated between them), ChainAcceptance (chain
// steps' acceptance evidence, per depth) and DraftLengthChooser, the
// load-adaptive draft length: each step, the chain length (0: a plain step, the root row alone
// and no draft forward) that maximises the step's expected tokens per second, from the
// measured costs of target steps and draft rounds and each speculative sequence's measured
// acceptance — so that it falls back to plain decoding where the rows a draft adds cost more
// than the tokens it is expected to gain. The runs behind its rules: docs/measurements.md,
// "Load policy".
#pragma once

#include <limits>
#include <map>
#include <span>
#include <vector>

namespace specula {

class CostFit {
 public:
  // `settle`: a row count seen once is not used while another has two (below).
  explicit CostFit(bool settle) : settle_(settle) {}

  // One observation: a step of `rows` rows took `seconds`. Each row count keeps its own
  // figure, so observations at one row count never erase what was measured at others: the
  // median of its last kRecent observations (the lower middle one of an even count), which
  // an outlier does not move and which follows a drift (attention over longer contexts)
  // within kRecent observations (a smoothed mean would carry a slow start for many steps);
  // its first observation is dropped once a second arrives (one-time costs, and the first
  // decode steps after a prefill run slow).
  void add(int rows, double seconds);
  // Predicted seconds of `rows` rows: linear between the nearest row counts observed on
  // either side; beyond the observed range, the slope of the two outermost ones (clamped to
  // >= 0); 0 before any observation. With a single row count r seen, its figure s bounds the
  // cost from below: s for rows >= r (costs grow with rows), s · rows / r for fewer (a fixed
  // part plus a part per row costs no less per row at fewer rows). Optimistic on purpose: an
  // estimate from one observation must not keep the chooser from measuring a second (a load
  // request's first draft round holds its whole prompt's catch-up, and a one-row round priced
  // at that round's cost would never be drafted again).
  double at(double rows) const;
  bool varied() const { return figures_.size() >= 2; }  // two or more row counts in use
  bool observed() const { return !by_rows_.empty(); }
  // The figure of the fewest rows observed (0 before any): for costs that grow with rows, an
  // upper bound on a step's fixed part.
  double fewest() const { return figures_.empty() ? 0 : figures_.begin()->second; }
  int fewest_rows() const { return figures_.empty() ? 0 : figures_.begin()->first; }
  // Observations at exactly `rows` rows (a row count's first is cold: one-time costs).
  int observations(int rows) const {
    const auto it = by_rows_.find(rows);
    return it == by_rows_.end() ? 0 : it->second.observations;
  }

  static constexpr int kRecent = 5;

 private:
  struct Figure {
    std::vector<double> recent;  // the last kRecent observations, oldest first
    int observations = 0;
    double seconds = 0;          // the figure: the lower median of `recent`
  };
  std::map<int, Figure> by_rows_;  // row count -> its figure
  // With settle_, the figures at() uses, by row count, are those of two or more observations
  // once any row count has two (a single observation is cold, and left alone it would price
  // its row count for good: a length priced too high is not chosen, so never measured again),
  // else every row count's; without, every row count's (draft rounds: a catch-up's row count
  // is seldom seen twice, and without its figure one row's cost bounds every catch-up row,
  // which can price a catch-up high enough to keep a request plain for good).
  bool settle_;
  std::map<int, double> figures_;
};

// Expected tokens of one chain step with acceptance rate `alpha` and `gamma` drafted tokens:
// (1 - alpha^(gamma + 1)) / (1 - alpha) (the bonus token included).
double expected_chain_tokens(double alpha, int gamma);

// Acceptance evidence of chain steps. The chain counts: accepted tokens, and trials =
// accepted tokens + rejecting steps (their ratio is the chain MLE of a per-token rate). And
// the same per depth: a step that drafted d tokens and accepted a of them tried depth k for
// every k <= min(a + 1, d) and passed it for every k <= a, so passed_at[k-1] / tried_at[k-1]
// estimates the chance of accepting the k-th drafted token given the k-1 before it were.
// Acceptance is not independent from token to token (an n-gram match or an easy stretch
// accepts whole chains, a hard one rejects at once), and the per-depth rates see that.
struct ChainAcceptance {
  double accepted = 0, trials = 0;
  std::vector<double> passed_at, tried_at;  // [depth - 1]
  // Chains that end early at a confidence stop (DraftBound::stop_below), per depth k:
  // drafted_at[k-1], the steps whose chain drafted a k-th token; stopped_at[k-1], those
  // allowed one that stopped after k-1; stopped_passed_at[k-1], those of them whose k-1
  // tokens were all accepted. A chain drafts its k-th token with chance drafted / (drafted
  // + stopped) once it has k-1, and with tried / (tried + stopped_passed) once those k-1
  // passed (a stop follows doubt, doubt follows tokens that fail: the two differ).
  std::vector<double> drafted_at, stopped_at, stopped_passed_at;
  // Steps whose drafter was asked for a proposal, and those it had one for (an n-gram
  // lookup that matched); a chain step above is one of the latter.
  double lookups = 0, proposals = 0;
  // Siblings proposed beside chains' first tokens (DraftBound::siblings), and those accepted.
  double sibling_rows = 0, sibling_passed = 0;

  // A chain step (a tree step: `chain` false, its totals alone; a tree's depths are not a
  // chain's); `stopped`: the chain ended at its confidence stop, short of what it was allowed.
  void add(int drafted, int accepted_tokens, bool chain, bool stopped = false);
  void add_lookup(bool proposed) { lookups += 1, proposals += proposed ? 1 : 0; }
  // A step with `siblings` siblings of its chain's first token; `accepted`: one of them was.
  void add_siblings(int siblings, bool accepted) { sibling_rows += siblings, sibling_passed += accepted ? 1 : 0; }
  // accepted / trials with `prior_trials` pseudo-trials at `prior`.
  double rate(double prior, double prior_trials) const {
    return (accepted + prior_trials * prior) / (trials + prior_trials);
  }
  // This evidence less `part` (evidence it holds), every count clamped at 0.
  ChainAcceptance without(const ChainAcceptance& part) const;
};

// The weight, in pseudo-trials, of the pool's estimate as a prior on a request's own
// acceptance evidence (chain_estimate, chain_price, proposal and sibling rates): a new request
// starts from what the others measured, and a few early rejections do not turn its drafting
// off for good under the cost model (which measures nothing while it chooses plain steps).
inline constexpr double kAcceptancePriorTrials = 8;

// The chain estimate of a per-token acceptance rate for a sequence with evidence `own` among
// sequences of the same drafter with evidence `pool` (own included; chain_estimate_among:
// `others`, the pool less own): own evidence with
// `prior_trials` pseudo-trials at the others' (pool less own) (accepted + 1) / (trials + 2).
// The prior is the others' alone: with own counted in it too, a lone request's first
// rejections would count twice, shrinking its estimate towards them twice over.
inline double chain_estimate_among(const ChainAcceptance& own, const ChainAcceptance& others, double prior_trials) {
  return own.rate(others.rate(0.5, 2), prior_trials);
}
inline double chain_estimate(const ChainAcceptance& own, const ChainAcceptance& pool, double prior_trials) {
  return chain_estimate_among(own, pool.without(own), prior_trials);
}

// The share of steps a sequence's drafter has a proposal for: its own lookups with
// `prior_trials` pseudo-lookups at the others' (pool less own: proposal_rate_among takes them)
// (proposals + 1) / (lookups + 1), so 1 until a lookup fails (a model drafter always proposes).
double proposal_rate_among(const ChainAcceptance& own, const ChainAcceptance& others, double prior_trials);
inline double proposal_rate(const ChainAcceptance& own, const ChainAcceptance& pool, double prior_trials) {
  return proposal_rate_among(own, pool.without(own), prior_trials);
}

// The tokens one sibling of a chain's first token brings (accepted siblings over siblings
// proposed): own evidence with `prior_trials` pseudo-siblings at the others' (pool less own)
// (passed + 1) / (rows + 2). Its row is a token where the chain's first token is rejected
// and the sibling accepted, so it folds in how often the first token fails.
double sibling_rate_among(const ChainAcceptance& own, const ChainAcceptance& others, double prior_trials);

// What a chain allowed g = 0..max_gamma tokens brings and costs ([max_gamma + 1] each).
struct ChainPrice {
  std::vector<double> tokens;   // expected tokens of its step ([0] = 1, a plain step)
  std::vector<double> reaches;  // the chance it drafts a g-th token ([0] = [1] = 1; < 1 past a confidence stop)
};

// The chain price of a sequence with evidence `own`, among sequences of the same drafter
// with evidence `pool` (own included). Per depth k, p_k = (own passed_k + w q_k) / (own
// tried_k + w) with w = prior_trials and q_k the others' rate at depth k, (others passed_k +
// 2 beta) / (others tried_k + 2), moved by the log-odds from their chain estimate beta to this
// sequence's alpha = chain_estimate(own, pool, w) (others = pool less own): the level from its
// own evidence, the shape across depths from theirs. The chances of drafting the k-th token,
// c_k after k-1 drafted and c'_k after k-1 accepted (ChainAcceptance), are own counts with
// w pseudo-counts at the others' (with 2 at 1: no stop seen, every token drafted; or, for
// chains with a confidence stop, at alpha past depth 1, so that a stop not yet seen does not
// price the chain at its full length).
// tokens(g) = 1 + sum_{k <= g} c'_1 p_1 ... c'_k p_k, reaches(g) = c_1 ... c_g.
// With no per-depth evidence every p_k is alpha and tokens(g) is expected_chain_tokens(alpha, g).
// chain_price_among takes the others' evidence (pool less own) itself.
ChainPrice chain_price_among(const ChainAcceptance& own, const ChainAcceptance& others, int max_gamma,
                             double prior_trials, bool confidence_stop = false);
inline ChainPrice chain_price(const ChainAcceptance& own, const ChainAcceptance& pool, int max_gamma,
                              double prior_trials, bool confidence_stop = false) {
  return chain_price_among(own, pool.without(own), max_gamma, prior_trials, confidence_stop);
}

// One load-policy sequence of a step, as the chooser sees it.
struct LoadSequence {
  std::vector<double> tokens;  // [max_gamma + 1]: expected tokens of a chain of each length (ChainPrice::tokens)
  int catch_up_rows = 0;       // rows its draft model must still feed before its first proposal, beyond the root
  int remaining_tokens = 0;    // tokens it may still generate (max_new_tokens less those it has)
  // Its draft model feeds the tokens a step accepted in its next proposal's first round (a
  // model drafter: the drafted tokens were never fed, only their context); an n-gram drafter
  // feeds nothing.
  bool feeds_accepted = false;
  // The most tokens its proposal can hold this step (an n-gram drafter's lookup found this
  // many, 0 where none matched: it takes a plain step; a model drafter's is unbounded): a
  // chain of g drafts min(g, depth_limit).
  int depth_limit = std::numeric_limits<int>::max();
  // The share of its steps whose drafter has a proposal at all (an n-gram drafter's lookups
  // that match; 1 for a model drafter): over the steps to come, a chain of g brings
  // 1 + proposal_rate (tokens[g] - 1).
  double proposal_rate = 1;
  // [max_gamma + 1]: the chance its chain drafts a k-th token when allowed k (ChainPrice::
  // reaches; a confidence stop ends chains early); empty: every allowed token is drafted.
  std::vector<double> reaches{};
  // Its drafter ends a chain where the draft doubts it (a draft model: DraftBound::stop_below).
  bool confidence_stop = false;
  // The tokens a sibling of its chain's first token brings (sibling_rate_among); 0 where its
  // drafter proposes none (n-grams).
  double sibling_tokens = 0;
};

// The chooser's answer for a step: the chain length of every load-policy sequence, or, for a
// scout step, of the one sequence `scout` (an index into the step's LoadSequence list; the
// others take plain steps).
struct LoadChoice {
  int gamma = 0;
  int scout = -1;
  // The chains' confidence stop (DraftBound::stop_below): a drafted token is worth one
  // more, in the step's seconds per token, when the draft expects the chain so far to pass
  // with at least the chance its row and draft-round share cost (0 for a scout or a probe).
  double stop_below = 0;
  // Siblings of each chain's first token (DraftBound::siblings), 0 or 1.
  int siblings = 0;
};

// The step model choose() prices chain lengths with (runtime/draft_length.cpp): rows, seconds
// and expected tokens a second at each length, from the fitted costs; pure.
class StepModel;

class DraftLengthChooser {
 public:
  // A decode step of `rows` target rows: its forward and the sampling, verification and
  // commits after it, `seconds` in all. (Not a scout step's: its rows are two more than a
  // plain step's, too close to price a row by.)
  void target_forward(int rows, double seconds) { target_.add(rows, seconds); }
  // One draft round (a tree level): a batched draft-model call of `rows` rows (the first
  // round of a proposal also holds the drafters' catch-up rows), or an n-gram round over
  // `rows` sequences.
  void draft_round(int rows, double seconds) { draft_.add(rows, seconds); }
  // A step with a prefill chunk: `rows` target rows in all, `seconds` (its forward and
  // what follows it). It bounds a verify row's cost from below (row_floor()).
  void prefill_step(int rows, double seconds);
  // A lower bound on the seconds one more row adds to a decode step: a prefill step's
  // seconds less the fixed part of a step (at most target.fewest()) over its rows — a
  // verify row does all a prefill row does and more (logits of its own, attention over the
  // whole prefix); the largest such bound seen, 0 before a prefill step and a decode step.
  double row_floor() const;

  // The chain length in [0, max_gamma] for the step's load-policy sequences `load` (n of
  // them, m of which can draft: depth_limit > 0; plain where m = 0), beside other_rows /
  // other_tokens: rows and tokens of the step's plain, prefill and fixed-length sequences.
  // (A sequence's chain of g is min(g, depth_limit_i) long; below, tokens_i[g] and reaches_i
  // are taken at that length.)
  // A length g > 0 is worth (StepModel::expected_rate) (other_tokens + Σ_i tokens_i[g]) / (target.at(other_rows +
  // Σ_i (1 + R_i)) + draft.at(m + A_g) + Σ_{k=2..g} P_k draft.at(E_k / P_k)) tokens a
  // second, with R_i = Σ_{k <= g} reaches_i[k] the tokens sequence i is expected to draft,
  // E_k = Σ_i reaches_i[k] the rows of draft round k and P_k = 1 - Π_i (1 - reaches_i[k])
  // the chance that it runs at all, and A_g = Σ_i (tokens_i[g] - 1) over the sequences that
  // feed accepted tokens: a model drafter's first round of a step feeds the previous step's
  // accepted tokens beside the roots, and costs more than a round of the roots alone. The
  // best length is drafted when it promises kMargin more than plain and its saving over the
  // sequences' remaining tokens, W (1/rate_0 - 1/rate_g) with W = Σ_i remaining_tokens_i,
  // repays the draft model's catch-up (the draft rows of Σ_i catch_up_rows_i, once: a
  // sequence's draft model feeds what plain steps committed before it drafts).
  // A `closed` batch (nothing waits to take a finished sequence's place) is done when its
  // slowest sequence is: there a length g is worth W / (seconds_g max_i(remaining_i /
  // steady_i[g])), with steady_i[g] = 1 + proposal_rate_i (tokens_i[g] - 1) the tokens a step
  // brings it on average (tokens_i at min(g, remaining_i - 1): this step's depth_limit does
  // not bound the steps to come), against plain's W / (seconds_0 max_i remaining_i); every
  // load-policy sequence counts, those with depth_limit 0 this step too (left out, they
  // would not hold back the batch's end, and drafting for the sequences that match would
  // seem to bring it nearer). Drafting that speeds up all but one sequence only thins the
  // batch's last steps: the others finish early and the batch runs on for the one left.
  // (Other sequences' remaining tokens are not weighed.)
  // Its phase (phase()) decides what it does. Before target steps of two row counts and a
  // draft round are measured: kMeasuringPlain, the plain step first, kPlainFigures times;
  // then (kScouting, kProbing: measure_drafting), unless
  // even a γ = 1 step at its lower bound (the plain step plus n rows at row_floor(),
  // drafting free) loses to plain, or its saving does not repay the scout's catch-up with
  // each draft row at row_floor(), a scout: one sequence (the one with the fewest catch-up
  // rows) drafts γ = kScoutGamma, so the draft model's cost is measured on one sequence's rows and not
  // on all n prompts' catch-up (at a large batch, several plain steps' time), its second
  // round of one row; then the probe, γ = 1 for all, where a γ = 1 step at the plain step
  // plus n rows at row_floor() and m of the scout's one-row rounds repays the catch-up (a
  // round's cost is mostly per sequence: logits, draft distribution and draw each). With
  // step costs linear in g and expected tokens concave in g, a chain that loses at g = 1
  // loses at every g. At batch 1 the scout is the probe. Then kChoosing (best_length):
  // Where every sequence's drafter has a confidence stop, only g = max_gamma is weighed
  // against plain: the stop sets each chain's depth. Where a sequence's drafter proposes
  // siblings of its chain's first token (sibling_tokens > 0), each length is weighed with
  // one too (LoadChoice::siblings): a target row where the chain stops short of its length,
  // 1 - reaches_i[g] (within the length's nodes), bringing sibling_tokens_i tokens, and no
  // draft round. A chosen length comes with its stop
  // (LoadChoice::stop_below): (target.at(rows + 1) - target.at(rows) + draft.at(m) / m) times
  // the chosen rate, a drafted token's cost in tokens, capped at 1.
  // Once it drafts, every kPlainEvery-th step it would draft is a plain step instead, so that
  // the plain step's cost stays measured (it is what drafting is compared with; otherwise it
  // keeps the figure of the steps before drafting began); for a lone sequence (no other rows,
  // n = 1) every kLonePlainEvery-th: its plain step drifts only with attention over its
  // growing context, and each plain step forgoes the speedup drafting brings a lone
  // sequence. And once it has drafted and stopped, every kPlainEvery-th plain step drafts
  // γ = 1 where that would pay with every drafted token accepted and the
  // catch-up costs no more than a plain step: acceptance and cost figures from a few steps
  // are not a verdict for good.
  LoadChoice choose(int other_rows, double other_tokens, std::span<const LoadSequence> load, int max_gamma,
                    bool closed = false);
  static constexpr int kPlainEvery = 16;
  static constexpr int kLonePlainEvery = 64;
  // Drafting must promise this much more than plain's tokens a second: the model's figures
  // err (acceptance from a few steps, costs that drift with the context), and drafting has
  // costs it does not see (sequences that finish at different steps leave a tail of thin
  // steps in a batch that nothing refills). Not for a lone sequence (no other rows, n = 1):
  // it has no tail and its rows are nearly free, so a wrong guess costs little and the margin
  // would only keep it plain where drafting pays.
  static constexpr double kMargin = 0.1;
  // Figures of the plain step before drafting is tried (the first decode steps after a
  // prefill run slow).
  static constexpr int kPlainFigures = 3;
  // The scout's chain: its second round, of one row, prices a round's fixed part.
  static constexpr int kScoutGamma = 2;
  // The same for sequences with nothing to catch up and no end in sight, with independent
  // acceptance (tokens[i][g] = expected_chain_tokens(alphas[i], g)) or per-depth chains.
  int choose(int other_rows, double other_tokens, std::span<const double> alphas, int max_gamma);
  int choose(int other_rows, double other_tokens, std::span<const std::vector<double>> tokens, int max_gamma);

  const CostFit& target_cost() const { return target_; }
  const CostFit& draft_cost() const { return draft_; }

  // Where the chooser stands, from what its fits hold: measuring the plain step (fewer than
  // three figures at the plain step's rows); scouting (no draft round yet, several
  // sequences: one sequence drafts); probing (a draft round measured, or a lone sequence,
  // but target steps of one row count only: γ = 1 for all); choosing (the best length from
  // the model).
  enum class Phase { kMeasuringPlain, kScouting, kProbing, kChoosing };
  Phase phase(int plain_rows, int sequences) const;

 private:
  // The scout's or the probe's step, where drafting could pay at its lower bound.
  LoadChoice measure_drafting(const StepModel& model, int max_gamma) const;
  // The length with the best expected rate, with the periodic plain and exploring steps.
  LoadChoice best_length(const StepModel& model, int max_gamma);

  CostFit target_{true}, draft_{false};
  int drafted_steps_ = 0;       // steps chosen to draft since the last plain step
  int plain_steps_ = 0;         // steps chosen plain since the last drafted step
  int prefill_rows_ = 0;        // the largest prefill step seen
  double prefill_seconds_ = 0;
};

}  // namespace specula
