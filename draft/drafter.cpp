#include "draft/drafter.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <tuple>

namespace specula {
namespace {

double seconds_since(std::chrono::steady_clock::time_point mark) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - mark).count();
}

// One batched forward of a draft model for `group` (drafters sharing its cache).
DraftCall run_model_forward(const ForwardContext& context, std::span<Drafter* const> group) {
  std::vector<SequenceRows> parts;
  for (Drafter* d : group) parts.push_back(*d->pending_forward());
  const std::size_t vocab = static_cast<std::size_t>(context.backend.config().vocab_size);
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * vocab);
  const auto mark = std::chrono::steady_clock::now();
  context.run(parts, logits);
  const DraftCall call{batch_rows(parts), seconds_since(mark)};
  std::size_t row = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    const std::size_t rows = static_cast<std::size_t>(logit_rows(std::span(&parts[i], 1)));
    group[i]->forward_done(std::span(logits).subspan(row * vocab, rows * vocab));
    row += rows;
  }
  return call;
}

// One batched forward of a head for `group` (drafters sharing its cache): their rows' input
// states side by side in, their logits and output states split back.
DraftCall run_head_forward(const HeadForwardContext& context, std::span<Drafter* const> group) {
  std::vector<SequenceRows> parts;
  std::vector<float> x;
  for (Drafter* d : group) {
    parts.push_back(*d->pending_forward());
    const std::span<const float> states = d->pending_states();
    x.insert(x.end(), states.begin(), states.end());
  }
  const std::size_t vocab = static_cast<std::size_t>(context.head.config().draft_vocab_size);
  const std::size_t hidden = static_cast<std::size_t>(context.head.config().hidden_size());
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * vocab);
  std::vector<float> out(static_cast<std::size_t>(batch_rows(parts)) * hidden);
  const auto mark = std::chrono::steady_clock::now();
  context.run(parts, x, logits, out);
  const DraftCall call{batch_rows(parts), seconds_since(mark)};
  std::size_t logit_row = 0, row = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    const std::size_t logit_n = static_cast<std::size_t>(logit_rows(std::span(&parts[i], 1)));
    const std::size_t n = parts[i].tokens.size();
    group[i]->head_forward_done(std::span<const float>(logits).subspan(logit_row * vocab, logit_n * vocab),
                                std::span<const float>(out).subspan(row * hidden, n * hidden));
    logit_row += logit_n;
    row += n;
  }
  return call;
}

// The state rows of `group`'s pending Medusa forwards side by side, and the most heads any reads.
std::pair<std::vector<float>, int> medusa_rows(std::span<Drafter* const> group) {
  std::vector<float> states;
  int heads = 0;
  for (Drafter* d : group) {
    const MedusaRows& m = *d->pending_medusa();
    states.insert(states.end(), m.state.begin(), m.state.end());
    heads = std::max(heads, m.heads);
  }
  return {std::move(states), heads};
}

// One batched Medusa heads forward for `group` (drafters sharing a backend and workspace): their
// state rows side by side in, each drafter's first heads of its row back.
void run_medusa_forward(std::span<Drafter* const> group) {
  const MedusaRows& first = *group.front()->pending_medusa();
  const std::size_t vocab = static_cast<std::size_t>(first.backend->config().vocab_size);
  const auto [states, heads] = medusa_rows(group);
  const int n = static_cast<int>(group.size());
  std::vector<float> logits(static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) * vocab);
  first.backend->forward(states, n, heads, *first.workspace, logits);
  for (std::size_t r = 0; r < group.size(); ++r) {
    const std::size_t own = static_cast<std::size_t>(group[r]->pending_medusa()->heads);
    group[r]->medusa_done(std::span<const float>(logits).subspan(r * static_cast<std::size_t>(heads) * vocab, own * vocab));
  }
}

// The same forward for `group`, each drafter's tree drawn from its row on the heads' device and
// left there: one round, not among the draft calls.
DeviceRounds leave_medusa_draws(std::span<Drafter* const> group) {
  const MedusaRows& first = *group.front()->pending_medusa();
  const auto [states, heads] = medusa_rows(group);
  std::vector<MedusaTree> trees;
  for (Drafter* d : group) trees.push_back(d->medusa_device_tree());
  const EnqueuedDraws enqueued =
      first.backend->enqueue_draws(states, static_cast<int>(group.size()), heads, trees, *first.workspace);
  for (std::size_t i = 0; i < group.size(); ++i) group[i]->chain_left_on_device(enqueued.draws, enqueued.draw_of[i]);
  return DeviceRounds{enqueued.draws, 0, false};
}

// The device chains of `group` (drafters sharing its cache) in one run_chains (one shape of
// dynamic trees, or chains and static trees).
void run_device_chains(const ForwardContext& context, std::span<Drafter* const> group, std::vector<DraftCall>* calls) {
  std::vector<DeviceChain> chains;
  std::size_t total = 0;
  bool sampled = false;
  for (Drafter* d : group) {
    chains.push_back(*d->device_chain());
    total += static_cast<std::size_t>(chains.back().length);
    sampled = sampled || chains.back().sampled();
  }
  const bool dynamic = chains.front().is_dynamic();
  const std::size_t vocab = static_cast<std::size_t>(context.backend.config().vocab_size);
  std::vector<int> tokens(total), parents(dynamic ? total : 0);
  std::vector<float> q(sampled ? total * vocab : 0);
  const std::vector<RoundTime> rounds = context.run_chains(chains, tokens, q, parents);
  if (calls)
    for (const RoundTime& r : rounds) calls->push_back(DraftCall{r.rows, r.seconds});
  std::size_t at = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    const std::size_t n = static_cast<std::size_t>(chains[i].length);
    const std::span<const float> rows =
        chains[i].sampled() ? std::span<const float>(q).subspan(at * vocab, n * vocab) : std::span<const float>();
    const std::span<const int> tree = dynamic ? std::span<const int>(parents).subspan(at, n) : std::span<const int>();
    group[i]->chain_drawn(std::span<const int>(tokens).subspan(at, n), tree, rows);
    at += n;
  }
}

// `group`'s chains enqueued and left on a device: each round among `calls`, each drafter given
// its draws.
DeviceRounds left_chains(const EnqueuedChains& enqueued, std::span<Drafter* const> group, std::vector<DraftCall>* calls) {
  DeviceRounds rounds{enqueued.draws, calls ? calls->size() : 0};
  if (calls)
    for (const int rows : enqueued.round_rows) calls->push_back(DraftCall{rows, 0});
  for (std::size_t i = 0; i < group.size(); ++i) group[i]->chain_left_on_device(enqueued.draws, enqueued.draw_of[i]);
  return rounds;
}

// The device chains of `group` (drafters sharing its cache) in one enqueue_chains, left there.
DeviceRounds leave_device_chains(const ForwardContext& context, std::span<Drafter* const> group,
                                 std::vector<DraftCall>* calls) {
  std::vector<DeviceChain> chains;
  for (Drafter* d : group) chains.push_back(*d->device_chain());
  return left_chains(context.enqueue_chains(chains), group, calls);
}

// The proposals of `group` (head drafters sharing a head's cache) drawn on the head's device in
// one enqueue_chains, left there.
DeviceRounds leave_head_chains(const HeadForwardContext& context, std::span<Drafter* const> group,
                               std::vector<DraftCall>* calls) {
  std::vector<DeviceChain> chains;
  std::vector<float> taps;
  for (Drafter* d : group) {
    const HeadChain c = d->head_device_chain();
    chains.push_back(c.chain);
    taps.insert(taps.end(), c.taps.begin(), c.taps.end());
  }
  return left_chains(context.enqueue_chains(chains, taps), group, calls);
}

// One device call of a cache: its drafters' shape (a dynamic tree's budget, width and top_k;
// zeros for chains and static trees).
using ShapeCall = std::tuple<const KvCache*, int, int, int>;
ShapeCall shape_call(const KvCache& cache, const DynamicDraft& shape) {
  return {&cache, shape.budget, shape.width, shape.top_k};
}

// Keeps each cache's first call in `calls`, moving its others to `rest` (dropping them where
// null).
void keep_first_shapes(std::map<ShapeCall, std::vector<Drafter*>>& calls, std::map<ShapeCall, std::vector<Drafter*>>* rest) {
  for (auto it = calls.begin(); it != calls.end();) {
    if (it == calls.begin() || std::get<0>(std::prev(it)->first) != std::get<0>(it->first)) {
      ++it;
      continue;
    }
    if (rest) {
      std::vector<Drafter*>& to = (*rest)[it->first];
      to.insert(to.end(), it->second.begin(), it->second.end());
    }
    it = calls.erase(it);
  }
}

}  // namespace

std::vector<DeviceRounds> run_draft_forwards(std::span<Drafter* const> drafters, std::vector<DraftCall>* calls,
                                             std::span<const bool> leave_on_device) {
  // Medusa heads per backend and workspace: the call read back first, then the one left there.
  std::map<std::tuple<const MedusaBackend*, Workspace*, bool>, std::vector<Drafter*>> medusa;
  for (std::size_t i = 0; i < drafters.size(); ++i)
    if (const MedusaRows* m = drafters[i]->pending_medusa()) {
      const bool leave = m->device && !leave_on_device.empty() && leave_on_device[i];
      medusa[{m->backend, m->workspace, leave}].push_back(drafters[i]);
    }
  std::vector<DeviceRounds> on_device;
  for (const auto& [key, group] : medusa) {
    if (std::get<2>(key))
      on_device.push_back(leave_medusa_draws(group));
    else
      run_medusa_forward(group);
  }
  // Per draft cache, the chains read back, then those left on the device: a later forward_draft
  // on the cache's workspace would overwrite the draws left there. One call per shape: dynamic
  // trees by (budget, width, top_k), zeros for the others. Per head cache, the proposals left
  // on the device (it reads none back).
  std::map<ShapeCall, std::vector<Drafter*>> read_back, left, heads_left;
  for (std::size_t i = 0; i < drafters.size(); ++i) {
    Drafter* d = drafters[i];
    const bool leave = !leave_on_device.empty() && leave_on_device[i];
    if (const DeviceChain* c = d->device_chain()) {
      const DynamicDraft shape =
          c->is_dynamic() ? DynamicDraft{c->length, c->dynamic_width, c->dynamic_top_k} : DynamicDraft{};
      (leave ? left : read_back)[shape_call(d->forward_context()->cache, shape)].push_back(d);
    } else if (const std::optional<DynamicDraft> shape = d->head_device_shape(); shape && leave) {
      heads_left[shape_call(d->head_context()->cache, *shape)].push_back(d);
    }
  }
  // A cache's first shape to leave stays left; a draft cache's others are read back, a head
  // cache's grow on the host.
  keep_first_shapes(left, &read_back);
  keep_first_shapes(heads_left, nullptr);
  for (const auto& [call, group] : read_back) run_device_chains(*group.front()->forward_context(), group, calls);
  for (const auto& [call, group] : left)
    on_device.push_back(leave_device_chains(*group.front()->forward_context(), group, calls));
  for (const auto& [call, group] : heads_left)
    on_device.push_back(leave_head_chains(*group.front()->head_context(), group, calls));
  for (;;) {
    // One batched call per draft cache. Keyed by the cache, not the context: each drafter holds
    // its own copy of the context (keyed by that, every sequence's round ran alone).
    std::map<const KvCache*, std::vector<Drafter*>> groups;
    for (Drafter* d : drafters) {
      if (!d->pending_forward()) continue;
      const HeadForwardContext* head = d->head_context();
      groups[head ? &head->cache : &d->forward_context()->cache].push_back(d);
    }
    if (groups.empty()) return on_device;
    for (const auto& [cache, group] : groups) {
      const HeadForwardContext* head = group.front()->head_context();
      const DraftCall call = head ? run_head_forward(*head, group) : run_model_forward(*group.front()->forward_context(), group);
      if (calls) calls->push_back(call);
    }
  }
}

Proposal propose(Drafter& drafter, std::span<const int> committed, DraftBound bound, Philox& rng) {
  drafter.start(committed, bound, rng);
  Drafter* const one[] = {&drafter};
  run_draft_forwards(one);
  return drafter.take_proposal();
}

}  // namespace specula
