// defines: Proposal and Drafter, the interface every proposer implements: start a token tree
// after the committed tokens, ask for the draft-model forwards it needs one at a time (so a
// scheduler can batch the forwards of many sequences into one call), hand back the finished
// tree, then learn which of its nodes were accepted; run_draft_forwards, which batches the
// pending forwards of many drafters by the cache they share; and propose(), the trivial driver
// of one drafter.
#pragma once

#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/rng.h"
#include "engine/batch.h"
#include "engine/forward.h"
#include "engine/head_forward.h"
#include "engine/medusa_backend.h"
#include "verify/token_tree.h"

namespace specula {

struct Proposal {
  TokenTree tree;
  // Draft distribution at each context, [tree.num_contexts(), vocab] row-major; empty when
  // the tree has no context whose children were sampled (greedy or point-mass proposals).
  std::vector<float> q;
  // The chain ended short of its max_depth at DraftBound::stop_below.
  bool stopped = false;
  // The tree's last `siblings` nodes are other candidates for the chain's first token
  // (DraftBound::siblings); the nodes before them are the chain. Of a tree left on a device,
  // those its distribution could not give are kAbsentDraw once verification gives the tokens.
  int siblings = 0;
  // A tree drawn on a device and left there (Drafter::chain_left_on_device): node i's token is
  // draw node_draws[i] of `draws`, and q is theirs; the tree's tokens are placeholders until
  // the target's verification on that device gives them (DeviceVerdict::drafted; an absent
  // node's is kAbsentDraw, never accepted).
  std::shared_ptr<const DeviceDraws> draws;
  std::vector<int> node_draws;  // [tree.size()] when draws
};

// How far a proposal may grow: at most max_depth tokens deep; and a chain drawn from a draft
// distribution ends after a token once the product of its tokens' draft probabilities is
// below stop_below (0: never), the draft's own estimate that the chain so far is accepted
// (drafters without a distribution, n-grams, and trees ignore it). Every token drawn is
// proposed; the stop saves the draft forwards and verify rows of the tokens after it.
// The stop reads only what the draft has drawn, so verification stays exact.
// A draft model's chain may also carry up to `siblings` other candidates for its first token,
// drawn once the chain is complete from the root's draft distribution without the tokens
// before them (sampled drafting; the verifier's kWithoutReplacement rule) or the next most
// probable ones (greedy), within max_nodes nodes in all (0: no bound): leaves the draft model
// never feeds, tried by the verifier where the chain's first token is rejected. They cost a
// verify row each and no draft forward (drawn whole on a device, also a row each in the
// chain's second draft round, never read: TreeGrowth::device_shape).
struct DraftBound {
  int max_depth = 0;
  double stop_below = 0;
  int siblings = 0;
  int max_nodes = 0;
};

// A head drafter's proposal as its head's device draws it whole (Drafter::head_device_chain):
// the chain or tree, its first rows the head's catch-up, and the catch-up's taps.
struct HeadChain {
  DeviceChain chain;
  std::span<const float> taps;  // [chain.first's rows, num_taps * target_hidden_size]
};

// The heads forward a Medusa drafter's proposal waits for (Drafter::pending_medusa): the first
// `heads` heads of `backend` over one state row, on `workspace`; where `device`, the proposal
// may instead be drawn whole on the backend's device (Drafter::medusa_device_tree).
struct MedusaRows {
  const MedusaBackend* backend = nullptr;
  Workspace* workspace = nullptr;
  std::span<const float> state;  // [hidden] the target's last state before its final norm
  int heads = 0;
  bool device = false;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // Starts a proposal. committed: in, every token of the sequence so far; the last one (the
  // root) is not yet in the target's cache. The tree grows within `bound`. `rng` is used
  // until take_proposal() and must outlive it.
  virtual void start(std::span<const int> committed, DraftBound bound, Philox& rng) = 0;

  // The forward the proposal needs next, on forward_context(), or nullptr once the proposal
  // is complete. Drafters that share a context (one draft model and cache) can run their
  // pending forwards as one batch.
  virtual const SequenceRows* pending_forward() { return nullptr; }
  // The logits of the pending forward: in [logit_rows of it, vocab].
  virtual void forward_done(std::span<const float> /*logits*/) {}
  // The rows a proposal started after `committed` tokens would feed its model before the
  // root's (the catch-up: committed tokens its cache does not hold yet); 0 for drafters that
  // run no model.
  virtual int catch_up_rows(int /*committed*/) const { return 0; }
  // The most tokens a proposal started after `committed` could hold, whatever its max_depth:
  // what an n-gram drafter's lookup finds (0: no n-gram matches); unbounded for a model
  // drafter, which always proposes.
  virtual int proposal_limit(std::span<const int> /*committed*/) { return std::numeric_limits<int>::max(); }
  // Where pending forwards run (nullptr for drafters that run no model, and for heads).
  virtual const ForwardContext* forward_context() const { return nullptr; }
  // A head's pending forwards run on a head's context instead (nullptr for other drafters):
  // its forward also takes each row's input state and gives each row's output state.
  virtual const HeadForwardContext* head_context() const { return nullptr; }
  // The input states of the pending forward's rows: in [rows, head hidden].
  virtual std::span<const float> pending_states() { return {}; }
  // A head's pending forward done: its logits (over the head's draft vocabulary) and out, in
  // [rows, head hidden] each row's output state.
  virtual void head_forward_done(std::span<const float> /*logits*/, std::span<const float> /*out*/) {}
  // Where a head drafter's proposal may be drawn whole on its head's device
  // (HeadForwardContext::enqueue_chains) in place of its pending forwards, and the caller
  // leaves it there for the target's verification: its shape, a dynamic tree's or off (a chain
  // or static tree). Nullopt once a forward of the proposal has run, and for other drafters.
  virtual std::optional<DynamicDraft> head_device_shape() const { return std::nullopt; }
  // That proposal to draw, its uniforms drawn now from the proposal's rng: called at most once a
  // proposal, in place of its pending forwards; its draws then arrive by chain_left_on_device.
  virtual HeadChain head_device_chain() { return {}; }
  // A Medusa drafter's heads forward, once per proposal (nullptr for other drafters, and once
  // it has run): drafters sharing a backend and workspace run theirs as one batched call.
  virtual const MedusaRows* pending_medusa() const { return nullptr; }
  // Its logits: in [heads, vocab] head i's at row i. The proposal is then complete.
  virtual void medusa_done(std::span<const float> /*logits*/) {}
  // Or, where pending_medusa()->device, the tree to draw from the heads' row on their device in
  // its place (MedusaBackend::enqueue_draws), its uniforms drawn now from the proposal's rng:
  // called at most once a proposal; its draws then arrive by chain_left_on_device.
  virtual MedusaTree medusa_device_tree() { return {}; }

  // The chain (or static tree) this proposal draws whole on its draft model's device
  // (Backend::forward_draft), in place of its pending forwards (ForwardContext::run_chains on
  // forward_context()); nullptr when the proposal grows on the host.
  virtual const DeviceChain* device_chain() const { return nullptr; }
  // That chain drawn: its tokens, in [length] (a tree's may be kAbsentDraw), a dynamic tree's
  // parents, in [length] (empty otherwise), and the distributions they were drawn from, in
  // [length, vocab] (empty unless sampled). The proposal is then complete.
  virtual void chain_drawn(std::span<const int> /*tokens*/, std::span<const int> /*parents*/,
                           std::span<const float> /*q*/) {}
  // Or that chain (or tree) drawn and left on the device for the target's verification there
  // (ForwardContext::enqueue_chains): token i is draw node_draws[i] of `draws`. The proposal is
  // then complete (Proposal::draws), a tree with all its nodes (those absent come back
  // kAbsentDraw with the verdict; a dynamic tree's parents come back with it too).
  virtual void chain_left_on_device(std::shared_ptr<const DeviceDraws> /*draws*/, std::span<const int> /*node_draws*/) {}

  // Whether the proposal in progress was drawn on a device (read back: chain_drawn, or left
  // there: chain_left_on_device).
  virtual bool drawn_on_device() const { return false; }

  // The finished proposal (once pending_forward() is nullptr).
  virtual Proposal take_proposal() = 0;

  // After verification: the nodes of the last proposal that were accepted (root-down).
  // `committed` now also holds the accepted tokens and the bonus token.
  virtual void accept(const TokenTree& tree, std::span<const int> accepted_nodes,
                      std::span<const int> committed) = 0;
};

// One batched forward of run_draft_forwards: its rows (over every drafter in it) and its wall
// time.
struct DraftCall {
  int rows = 0;
  double seconds = 0;
};

// Rounds of device chains left on their device: calls[first_call + r] is round r, its seconds
// 0 until a forward_verify that read the draws has returned (DeviceDraws::round_seconds); or,
// not in_calls, the one round of Medusa heads' trees left there (not a draft round).
struct DeviceRounds {
  std::shared_ptr<const DeviceDraws> draws;
  std::size_t first_call = 0;
  bool in_calls = true;
};

// Runs the pending forwards of every drafter: first the Medusa heads forwards (one batched call
// per heads backend and workspace, each call's heads the most any of its drafters reads; not
// a draft round, so not among `calls`), those of the drafters `leave_on_device` marks whose
// proposal a device may draw (MedusaRows::device) in one enqueue_draws a backend and workspace
// instead, after its read-back call, their trees left there (Drafter::chain_left_on_device);
// then the chains drawn on a device (Drafter::device_chain), those sharing a draft cache in one
// run_chains (dynamic trees in one of their own per shape) — or, for the drafters
// `leave_on_device` marks (empty: none), in one enqueue_chains whose draws stay there
// (Drafter::chain_left_on_device): one such call a draft cache, of its first shape (chains and
// static trees first, then dynamic trees by budget, width and top_k), the other shapes read
// back before it —; then the proposals of head drafters `leave_on_device` marks that their
// head's device may draw (Drafter::head_device_shape), in one enqueue_chains a head cache, left
// there (of its first shape, as a draft cache's; the others grow on the host, below); then
// round by round, those sharing a draft cache (a draft model's or a head's) as one batched call.
// Each call is appended to `calls` when given (a device chain's: each round, with its device
// time). Returns the rounds left on a device (the Medusa heads' too).
std::vector<DeviceRounds> run_draft_forwards(std::span<Drafter* const> drafters, std::vector<DraftCall>* calls = nullptr,
                                             std::span<const bool> leave_on_device = {});

// The trivial driver: start, the drafter's pending forwards run alone, the proposal.
Proposal propose(Drafter& drafter, std::span<const int> committed, DraftBound bound, Philox& rng);

}  // namespace specula
