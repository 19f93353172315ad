#include "runtime/scheduler.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "draft/head_drafter.h"
#include "draft/medusa_drafter.h"
#include "draft/ngram_drafter.h"
#include "runtime/decoders.h"
#include "sampling/sampler.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

// The Philox stream of sample `sample` of the request named `key` (key 0, sample s: stream s,
// the stream a lone request has always used).
uint64_t sample_stream(uint64_t key, int sample) { return (key << 32) | static_cast<uint32_t>(sample); }

// The forwards a drafter's model ran (0 for drafters that run none).
long draft_forwards(const Drafter& drafter) {
  if (const auto* md = dynamic_cast<const ModelDrafter*>(&drafter)) return md->draft_forwards();
  if (const auto* hd = dynamic_cast<const HeadDrafter*>(&drafter)) return hd->draft_forwards();
  if (const auto* md = dynamic_cast<const MedusaDrafter*>(&drafter)) return md->draft_forwards();
  return 0;
}

}  // namespace

// One draft model's cache, shared by every drafter of that model (so their forwards batch).
struct Scheduler::DraftPool {
  KvCache cache;
  std::unique_ptr<Workspace> workspace;
  ForwardContext context;
  DraftPool(const Backend& draft, const GenerateOptions& shared, int blocks)
      : cache(request_kv_layout(draft, shared), blocks), workspace(draft.make_workspace()),
        context{draft, cache, *workspace} {}
};

// One draft head's cache, shared by every drafter of that head.
struct Scheduler::HeadPool {
  KvCache cache;
  std::unique_ptr<Workspace> workspace;
  HeadForwardContext context;
  HeadPool(const HeadBackend& head, const ModelConfig& target, int block_size, int blocks)
      : cache(head.kv_layout(block_size), blocks), workspace(head.make_workspace()),
        context{head, target, cache, *workspace} {}
};

// One Medusa head's workspace, shared by every drafter of that head.
struct Scheduler::MedusaPool {
  const MedusaBackend& medusa;
  std::unique_ptr<Workspace> workspace;
  explicit MedusaPool(const MedusaBackend& m) : medusa(m), workspace(m.make_workspace()) {}
};

Scheduler::AcceptanceKey Scheduler::acceptance_key(const GenerateOptions& o) {
  const DraftOptions& d = o.draft;
  const SamplingOptions& s = o.sampling;
  return {static_cast<int>(d.method), d.model_dir, weights_name(d.weights), d.ngram_min, d.ngram_max,
          static_cast<int>(s.strategy), s.temperature, s.top_k, s.top_p, s.min_p};
}

struct Scheduler::Request {
  GenerateOptions options;
  uint64_t key = 0;
  TokenSink sink;
  std::unique_ptr<Sampler> sampler;        // none for beam search
  RowControls controls;                    // options.controls over its sequences' tokens
  DistributionFn draft_distribution;       // model drafter
  TreeShape tree_shape;                    // model drafter: its tree, built once for every sequence
  std::unique_ptr<DraftLengthPolicy> own_length_policy;  // fixed, threshold
  DraftLengthPolicy* length_policy = nullptr;            // speculative: its own or the scheduler's cost model
  DraftPool* draft = nullptr;              // model drafter
  HeadPool* head = nullptr;                // head drafter
  MedusaPool* medusa = nullptr;            // Medusa drafter
  int forked = 0;                          // samples started
  int unfinished = 0;                      // started and not complete
  // The fed prompt while samples are still to fork: in the target's cache, the draft model's
  // and the head's.
  KvCache::SeqId root_target = -1, root_draft = -1, root_head = -1;
  std::vector<float> root_logits;          // plain: next-token logits after the prompt, [vocab]
  long counted_step = -1;                  // the last step counted in out.target_forwards
  ChainAcceptance own;                     // acceptance evidence of its chains
  ChainAcceptance* pool = nullptr;         // every request's of the same drafter and sampling
  RequestOutcome out;

  // The chain acceptance rate's estimate: accepted tokens over accepted tokens plus
  // rejecting steps (the chain MLE), its own evidence with the pool's estimate as a prior.
  double alpha() const { return chain_estimate(own, *pool, kAcceptancePriorTrials); }

  bool speculative() const { return options.draft.method != DraftMethod::kNone; }
  // A new, empty sequence in its drafter's cache (a draft model's or a head's); -1 when it has none.
  KvCache::SeqId new_draft_seq() const { return draft ? draft->cache.create() : head ? head->cache.create() : -1; }
  // The log-probability options.logprobs asks for of `token` drawn from `logits` (whose
  // sampler distribution is `probs`); nullopt when none is asked for.
  std::optional<TokenLogprob> logprob(std::span<const float> logits, std::span<const float> probs, int token) const {
    if (!options.logprobs) return std::nullopt;
    const bool raw = options.logprobs_source == LogprobSource::kRaw;
    return token_logprob(options.logprobs_source, raw ? logits : probs, token, *options.logprobs);
  }
  // Its samples' first token is drawn from the prompt's logits (plain requests and those of a
  // length policy that may skip drafting: load, threshold), not verified in a first
  // speculative step (fixed-length studies: every token through the drafter and verifier).
  // That step spends a target forward on what the prefill gives: one step in 49 for 48 new
  // tokens.
  bool first_token_from_prompt() const { return !speculative() || options.gamma_policy != GammaPolicy::kFixed; }
  // Under a policy that may skip drafting, a request's draft model gets the prompt only when
  // the policy first drafts for it (its drafter catches up then, batched with the others'
  // first rounds), not at admission: a request the policy never drafts for never runs a
  // draft forward.
  bool lazy_draft() const { return options.gamma_policy != GammaPolicy::kFixed; }
  int generated(int sample) const { return static_cast<int>(out.samples[static_cast<std::size_t>(sample)].size()); }
};

// A request's prompt (sample -1, forked into the samples once fed) or one sample.
struct Scheduler::Sequence {
  Request* request = nullptr;
  int sample = -1;
  long order = 0;                 // admission order of the sample (the newest is preempted first)
  std::vector<int> tokens;        // committed tokens while no SpeculativeSequence holds them
  KvCache::SeqId seq = -1;        // target sequence, -1 while preempted
  Philox rng{0};                  // while no SpeculativeSequence holds it
  int gamma = 0;                  // adaptive chain length to resume with (0: the configured one)
  std::unique_ptr<SpeculativeSequence> spec;  // a speculative sample whose target holds all but the root
  int feed = 0;                   // rows fed this step (prefill chunk or decode row)
  std::vector<int> positions;     // [feed] of this step's fed rows

  // Tokens the target must hold before the next action: all (the logits of the last give the
  // next token) or all but the root (a speculative sample being recomputed, or the prompt of
  // a request whose first token is verified: the root leads the verify rows).
  bool holds_root_back() const {
    return request->speculative() && (sample >= 0 || !request->first_token_from_prompt());
  }
  int feed_target() const { return static_cast<int>(tokens.size()) - (holds_root_back() ? 1 : 0); }
  bool wants_logits() const { return !holds_root_back(); }
};

Scheduler::Scheduler(ModelStore& models, const GenerateOptions& shared, SchedulerLimits limits)
    : models_(models),
      shared_(shared),
      limits_(limits),
      target_(models.get(shared.model_dir, shared.weights, shared.backend)),
      cache_(request_kv_layout(target_, shared), std::max(limits.kv_blocks, 1)),
      workspace_(target_.make_workspace()),
      context_{target_, cache_, *workspace_},
      start_(Clock::now()) {
  validate_limits(limits_);
}

Scheduler::~Scheduler() = default;

double Scheduler::now() const { return seconds(start_, Clock::now()); }

KvStats Scheduler::kv_stats() const { return cache_.stats(); }

int Scheduler::draft_blocks_in_use() const {
  int blocks = 0;
  for (const auto& [key, pool] : draft_pools_) blocks += pool->cache.stats().blocks_in_use;
  return blocks;
}

const RequestOutcome& Scheduler::outcome(int request) const {
  const std::unique_ptr<Request>& r = requests_.at(static_cast<std::size_t>(request));
  SPECULA_CHECK(r, "scheduler: request ", request, " was released");
  return r->out;
}

void Scheduler::release(int request) {
  std::unique_ptr<Request>& r = requests_.at(static_cast<std::size_t>(request));
  SPECULA_CHECK(r && r->out.done, "scheduler: request ", request, " is ", r ? "not finished" : "released already");
  r.reset();
}

bool Scheduler::idle() const { return waiting_.empty() && parked_.empty() && live_.empty() && preempted_.empty(); }

Scheduler::DraftPool& Scheduler::draft_pool(const DraftOptions& d) {
  auto& pool = draft_pools_[{d.model_dir, d.weights}];
  // A drafter's sequence holds at most its target's tokens and one tree: the target pool
  // plus a block and a copy per live sequence never runs out before the target's.
  if (!pool)
    pool = std::make_unique<DraftPool>(draft_model(models_, d, shared_.backend), shared_,
                                       limits_.kv_blocks + 2 * limits_.max_sequences + 2);
  return *pool;
}

Scheduler::HeadPool& Scheduler::head_pool(const DraftOptions& d) {
  auto& pool = head_pools_[d.model_dir];
  if (!pool) {
    const HeadBackend& head = models_.head(d.model_dir, shared_.model_dir, shared_.backend, head_kind(d.method));
    const HeadConfig& c = head.head().config();
    keep_states(c.tap_layers, static_cast<int>(c.tap_layers.size()) * target_.config().hidden_size,
                std::string(head_kind_name(c.kind)) + " head " + d.model_dir);
    // As a draft model's pool: the target's blocks plus a block and a copy per live sequence.
    pool = std::make_unique<HeadPool>(head, target_.config(), shared_.kv_block_size,
                                      limits_.kv_blocks + 2 * limits_.max_sequences + 2);
  }
  return *pool;
}

Scheduler::MedusaPool& Scheduler::medusa_pool(const DraftOptions& d) {
  auto& pool = medusa_pools_[d.model_dir];
  if (!pool) {
    const MedusaBackend& medusa = models_.medusa(d.model_dir, shared_.model_dir, shared_.backend);
    const int last = target_.config().num_hidden_layers;
    keep_states({last}, target_.config().hidden_size, "Medusa head " + d.model_dir);
    pool = std::make_unique<MedusaPool>(medusa);
  }
  return *pool;
}

void Scheduler::keep_states(const std::vector<int>& layers, int width, const std::string& owner) {
  if (cache_.state_width() > 0) {
    const std::span<const int> kept = cache_.state_layers();
    std::string kept_text, asked_text;
    for (int l : kept) kept_text += (kept_text.empty() ? "" : ", ") + std::to_string(l);
    for (int l : layers) asked_text += (asked_text.empty() ? "" : ", ") + std::to_string(l);
    SPECULA_CHECK(std::equal(kept.begin(), kept.end(), layers.begin(), layers.end()) && width == cache_.state_width(),
                  "scheduler: the ", owner, " taps target layers [", asked_text, "], but this scheduler's target cache "
                  "keeps the states of layers [", kept_text, "] for the ", states_owner_,
                  " (one state store a scheduler): run the two heads in separate batches");
    return;
  }
  cache_.keep_states(layers, width);
  states_owner_ = owner;
}

int Scheduler::submit(const GenerateOptions& options, uint64_t key, TokenSink sink, double arrived_s) {
  const OptionNames names = cli_option_names();
  validate_generate_options(models_, options, names);
  SPECULA_CHECK(options.model_dir == shared_.model_dir && options.weights == shared_.weights &&
                    options.backend == shared_.backend && options.kv_block_size == shared_.kv_block_size &&
                    options.kv_dtype == shared_.kv_dtype,
                "scheduler: every request of a batch runs on one target (", shared_.model_dir, " weights ",
                weights_name(shared_.weights), ", ", name_of(shared_.backend), ", KV blocks of ", shared_.kv_block_size,
                " in ", name_of(cache_.layout().dtype), "), got ", options.model_dir, " weights ",
                weights_name(options.weights), ", ", name_of(options.backend), ", ", options.kv_block_size, " in ",
                name_of(request_kv_layout(target_, options).dtype));
  const bool beam = options.sampling.strategy == Strategy::kBeam;
  if (!beam) check_request_fits(options, limits_);

  auto r = std::make_unique<Request>();
  r->options = options;
  r->key = key;
  r->sink = std::move(sink);
  r->out.submitted_s = arrived_s < 0 ? now() : std::min(arrived_s, now());
  if (!beam) {
    r->sampler = make_sampler(options.sampling);
    r->controls = RowControls{&r->options.controls, options.prompt_ids.size(), target_.config().eos_token_ids};
    r->out.samples.resize(static_cast<std::size_t>(options.num_samples));
    if (options.logprobs) r->out.logprobs.resize(static_cast<std::size_t>(options.num_samples));
    if (!options.stop_strings.empty())
      r->out.texts.assign(static_cast<std::size_t>(options.num_samples), StopStrings(options.stop_strings));
  }
  if (!beam && options.draft.method != DraftMethod::kNone) {
    r->pool = &acceptance_[acceptance_key(options)];
    r->own_length_policy = make_length_policy(options);
    r->length_policy = r->own_length_policy ? r->own_length_policy.get() : &cost_model_;
  }
  if (!beam && options.draft.method == DraftMethod::kModel) {
    r->draft_distribution = draft_distribution(options.sampling, options.draft);
    r->tree_shape = tree_shape(options.draft);
    r->draft = &draft_pool(options.draft);
  }
  if (!beam && drafts_with_eagle_head(options.draft.method)) {
    r->draft_distribution = draft_distribution(options.sampling, options.draft);
    r->tree_shape = tree_shape(options.draft);
    r->head = &head_pool(options.draft);
  }
  if (!beam && options.draft.method == DraftMethod::kMedusa) {
    r->draft_distribution = draft_distribution(options.sampling, options.draft);
    r->tree_shape = tree_shape(options.draft);
    r->medusa = &medusa_pool(options.draft);
  }
  requests_.push_back(std::move(r));
  waiting_.push_back(requests_.back().get());
  return static_cast<int>(requests_.size()) - 1;
}

int Scheduler::step_rows(const Sequence& s) const {
  if (s.spec) return 1 + max_tree_nodes(s.request->options.draft);
  const int remaining = s.feed_target() - cache_.length(s.seq);
  return remaining <= 1 ? remaining : std::min(remaining, limits_.prefill_tokens);
}

int Scheduler::headroom() const {
  int need = 0;
  for (const auto& s : live_) need += append_blocks(cache_.length(s->seq), step_rows(*s), shared_.kv_block_size);
  return cache_.stats().blocks_free() - need;
}

void Scheduler::start_root(Request& r) {
  auto root = std::make_unique<Sequence>();
  root->request = &r;
  root->order = next_order_++;
  root->tokens = r.options.prompt_ids;
  root->seq = cache_.create();
  if (r.out.started_s == 0) r.out.started_s = now();
  Sequence& s = *root;
  live_.push_back(std::move(root));
  if (s.feed_target() == 0) root_fed(s, {});  // a one-token prompt whose first token is verified
}

void Scheduler::root_fed(Sequence& root, std::span<const float> logits) {
  Request& r = *root.request;
  r.root_target = root.seq;
  // The draft model's copy of the prompt, forked by every sample's drafter (a lazy one's
  // drafters start empty and catch up).
  if (r.draft && !r.lazy_draft() && root.feed_target() > 0) {
    std::vector<float> unused;
    r.root_draft = prefill(r.draft->context, std::span(root.tokens).first(static_cast<std::size_t>(root.feed_target())), unused);
  }
  // The head's entries of the prompt, forked by every sample's drafter.
  if (r.head && root.feed_target() > 1) {
    std::vector<float> logits, out;
    r.root_head = r.head->cache.create();
    feed_head_entries(r.head->context, r.root_head, cache_, root.seq,
                      std::span(root.tokens).first(static_cast<std::size_t>(root.feed_target())), logits, out);
  }
  if (r.out.prefilled_s == 0) r.out.prefilled_s = now();
  r.root_logits.assign(logits.begin(), logits.end());
  const auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& p) { return p.get() == &root; });
  live_.erase(it);
  parked_.push_back(&r);
  fork_samples(r);
}

void Scheduler::fork_samples(Request& r) {
  const int prompt = static_cast<int>(r.options.prompt_ids.size());
  const int first_rows = 1 + max_tree_nodes(r.options.draft);
  while (r.forked < r.options.num_samples && static_cast<int>(live_.size()) < limits_.max_sequences &&
         headroom() >= append_blocks(prompt, first_rows, shared_.kv_block_size)) {
    auto sample = std::make_unique<Sequence>();
    Sequence& s = *sample;
    s.request = &r;
    s.sample = r.forked++;
    s.order = next_order_++;
    s.tokens = r.options.prompt_ids;
    s.seq = cache_.fork(r.root_target);
    s.rng = Philox(r.options.seed, sample_stream(r.key, s.sample));
    ++r.unfinished;
    live_.push_back(std::move(sample));
    // Its drafter's draft-model sequence: the prompt's copy, or an empty one that catches up.
    const auto draft_seq = [&r] {
      if (r.root_head >= 0) return r.head->cache.fork(r.root_head);
      return r.root_draft >= 0 ? r.draft->cache.fork(r.root_draft) : r.new_draft_seq();
    };
    if (!r.first_token_from_prompt()) {
      make_speculative(s, draft_seq());
      continue;
    }
    std::vector<float> probs(r.root_logits.size()), edited;
    r.sampler->distribution(r.controls.edited(r.root_logits, s.tokens, {}, edited), probs);
    const int token = r.sampler->draw(probs, s.rng);
    s.tokens.push_back(token);
    bool done = false;
    const std::size_t before = r.out.samples[static_cast<std::size_t>(s.sample)].size();
    const std::optional<TokenLogprob> logprob = r.logprob(r.root_logits, probs, token);
    emit(s, std::span(&token, 1), done, logprob ? std::span(&*logprob, 1) : std::span<const TokenLogprob>());
    r.out.tokens_from_prompt += static_cast<int>(r.out.samples[static_cast<std::size_t>(s.sample)].size() - before);
    if (done) {
      finish(s);
    } else if (r.speculative()) {
      make_speculative(s, draft_seq());
    }
  }
  if (r.forked < r.options.num_samples) return;
  drop_root(r);
  parked_.erase(std::find(parked_.begin(), parked_.end(), &r));
}

std::unique_ptr<Drafter> Scheduler::make_drafter(Request& r, KvCache::SeqId target_seq, KvCache::SeqId draft_seq,
                                                 int gamma) {
  const DraftOptions& d = r.options.draft;
  if (d.method == DraftMethod::kNgram) return std::make_unique<NgramDrafter>(NgramConfig{d.ngram_min, d.ngram_max, d.gamma});
  TreeShape shape = r.tree_shape;
  if (shape.adaptive && gamma > 0) shape.topology = chain_topology(gamma);
  const SamplingOptions& o = r.options.sampling;
  const DrawOptions device = r.sampler->is_greedy() ? DrawOptions{} : DrawOptions{o.temperature, o.top_k, o.top_p, o.min_p};
  if (d.method == DraftMethod::kMedusa)
    return std::make_unique<MedusaDrafter>(r.medusa->medusa, *r.medusa->workspace, cache_, target_seq,
                                           target_.config().num_hidden_layers, r.draft_distribution,
                                           !r.sampler->is_greedy(), std::move(shape), r.controls, device);
  if (drafts_with_eagle_head(d.method))
    return std::make_unique<HeadDrafter>(r.head->context, draft_seq, cache_, target_seq,
                                         r.draft_distribution, !r.sampler->is_greedy(), std::move(shape), r.controls,
                                         device);
  return std::make_unique<ModelDrafter>(r.draft->context, draft_seq, r.draft_distribution, !r.sampler->is_greedy(),
                                        std::move(shape), r.controls, device);
}

void Scheduler::make_speculative(Sequence& s, KvCache::SeqId draft_seq) {
  Request& r = *s.request;
  s.spec = std::make_unique<SpeculativeSequence>(context_, s.seq, make_drafter(r, s.seq, draft_seq, s.gamma), *r.sampler,
                                                 std::move(s.tokens), s.rng, r.options.verify_rule, r.controls);
  if (r.options.logprobs) s.spec->record_logprobs(*r.options.logprobs, r.options.logprobs_source);
  s.tokens.clear();
}

void Scheduler::emit(Sequence& s, std::span<const int> tokens, bool& done, std::span<const TokenLogprob> logprobs) {
  Request& r = *s.request;
  std::vector<int>& ids = r.out.samples[static_cast<std::size_t>(s.sample)];
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::size_t before = ids.size();
    done = emit_token(ids, tokens[i], r.options, target_.config().eos_token_ids, s.sample, r.sink,
                      logprobs.empty() ? nullptr : &logprobs[i]);
    if (ids.size() > before) {
      if (!logprobs.empty()) r.out.logprobs[static_cast<std::size_t>(s.sample)].push_back(logprobs[i]);
      if (r.out.first_token_s == 0) r.out.first_token_s = now();
      if (s.sample == 0) r.out.token_s.push_back(now());
      if (!r.out.texts.empty()) {
        const std::string piece =
            target_.model().tokenizer().decode_piece(std::span(ids).first(ids.size() - 1), ids.back());
        done = r.out.texts[static_cast<std::size_t>(s.sample)].feed(piece) || done;
      }
    }
    if (done) return;
  }
}

void Scheduler::free_blocks(Sequence& s) {
  if (s.spec) {
    s.request->out.draft_forwards += draft_forwards(s.spec->drafter());
    s.spec.reset();  // frees its target and draft sequences
  } else if (s.seq >= 0) {
    cache_.free(s.seq);
  }
  s.seq = -1;
}

void Scheduler::drop_root(Request& r) {
  cache_.free(r.root_target);
  r.root_target = -1;
  if (r.root_draft >= 0) r.draft->cache.free(r.root_draft);
  r.root_draft = -1;
  if (r.root_head >= 0) r.head->cache.free(r.root_head);
  r.root_head = -1;
  r.root_logits.clear();
}

void Scheduler::cancel(int request) {
  const std::unique_ptr<Request>& held = requests_.at(static_cast<std::size_t>(request));
  if (!held || held->out.done) return;
  Request& r = *held;
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &r), waiting_.end());
  if (const auto it = std::find(parked_.begin(), parked_.end(), &r); it != parked_.end()) {
    parked_.erase(it);
    drop_root(r);
  }
  const auto of_request = [&r](const std::unique_ptr<Sequence>& s) { return s->request == &r; };
  for (const auto& s : live_)
    if (of_request(s)) free_blocks(*s);
  std::erase_if(live_, of_request);
  std::erase_if(preempted_, of_request);
  r.out.cancelled = true;
  r.out.finished_s = now();
  r.out.done = true;
}

void Scheduler::finish(Sequence& s) {
  Request& r = *s.request;
  free_blocks(s);
  const auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& p) { return p.get() == &s; });
  live_.erase(it);
  if (--r.unfinished == 0 && r.forked == r.options.num_samples) {
    r.out.finished_s = now();
    r.out.done = true;
  }
}

void Scheduler::preempt(Sequence& s) {
  Request& r = *s.request;
  ++stats_.preemptions;
  ++r.out.preemptions;
  const auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& p) { return p.get() == &s; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  live_.erase(it);
  if (s.sample < 0) {  // a prompt still being fed: it starts over
    cache_.free(s.seq);
    waiting_.push_front(&r);
    return;
  }
  if (s.spec) {
    // Keep what the step loop needs to resume exactly: the committed tokens, the random
    // stream and an adaptive chain's length; the caches are recomputed.
    s.tokens = s.spec->committed();
    s.rng = s.spec->rng();
    std::unique_ptr<Drafter> drafter = s.spec->release_drafter();
    if (auto* md = dynamic_cast<ModelDrafter*>(drafter.get())) s.gamma = md->gamma();
    if (auto* hd = dynamic_cast<HeadDrafter*>(drafter.get())) s.gamma = hd->gamma();
    r.out.draft_forwards += draft_forwards(*drafter);
    s.spec.reset();  // frees the target sequence
  } else {
    cache_.free(s.seq);
  }
  s.seq = -1;
  const auto at = std::upper_bound(preempted_.begin(), preempted_.end(), s.order,
                                   [](long order, const auto& p) { return order < p->order; });
  preempted_.insert(at, std::move(owned));
}

void Scheduler::run_beam(Request& r) {
  const double start = now();
  DecodeRun run = r.options.draft.method == DraftMethod::kNone
                      ? decode_beam(target_, r.options, r.sink)
                      : decode_speculative_beam(models_, target_, r.options, r.sink);
  r.out.started_s = start;
  r.out.prefilled_s = start + run.prefill_s;
  r.out.samples = std::move(run.samples);
  if (!r.options.stop_strings.empty())
    for (const std::vector<int>& hypothesis : r.out.samples)
      r.out.texts.push_back(stop_text(target_.model().tokenizer(), r.options.stop_strings, hypothesis));
  // Plain beam search draws every hypothesis's first token from the prompt's logits; the
  // speculative one verifies it in its first step.
  if (r.options.draft.method == DraftMethod::kNone)
    for (const auto& hypothesis : r.out.samples) r.out.tokens_from_prompt += hypothesis.empty() ? 0 : 1;
  r.out.target_forwards = run.target_forwards;
  r.out.target_rows = run.target_forwards_rows;
  r.out.extra = std::move(run.extra);
  r.out.own_kv = run.kv;
  // Its forwards are the run's steps: it ran alone.
  stats_.steps += run.target_forwards;
  stats_.rows += run.target_forwards_rows;
  stats_.sequence_steps += run.target_sequences;
  r.out.first_token_s = r.out.finished_s = now();
  r.out.done = true;
}

void Scheduler::admit() {
  const int bs = shared_.kv_block_size;
  const auto room = [&] { return static_cast<int>(live_.size()) < limits_.max_sequences; };
  // Preempted sequences first (oldest first), then samples of fed prompts, then new requests.
  while (!preempted_.empty() && room()) {
    Sequence& s = *preempted_.front();
    if (append_blocks(0, s.feed_target() + 1, bs) > headroom()) break;
    s.seq = cache_.create();
    const auto at = std::upper_bound(live_.begin(), live_.end(), s.order,
                                     [](long order, const auto& p) { return order < p->order; });
    live_.insert(at, std::move(preempted_.front()));
    preempted_.erase(preempted_.begin());
    // A speculative sample of a one-token prompt has nothing to recompute but its drafter.
    if (s.request->speculative() && s.feed_target() == 0) make_speculative(s, s.request->new_draft_seq());
  }
  for (Request* r : std::vector<Request*>(parked_)) fork_samples(*r);
  while (!waiting_.empty() && room()) {
    Request& r = *waiting_.front();
    if (r.options.sampling.strategy == Strategy::kBeam) {
      if (!live_.empty() || !parked_.empty() || !preempted_.empty()) break;  // beam runs as one unit, alone
      waiting_.pop_front();
      run_beam(r);
      continue;
    }
    if (append_blocks(0, static_cast<int>(r.options.prompt_ids.size()) + 1, bs) > headroom()) break;
    waiting_.pop_front();
    start_root(r);
  }
}

void Scheduler::unpark_newest() {
  Request& r = *parked_.back();
  parked_.pop_back();
  drop_root(r);
  waiting_.push_front(&r);
}

// Makes sequences live (admission, then giving parked prompts back while nothing else can
// run); false when none is.
bool Scheduler::make_live() {
  admit();
  // Prompts fed but unable to fork while nothing else runs hold the blocks others need: the
  // newest gives its prompt back (it is fed again later).
  while (live_.empty() && !parked_.empty() && (!waiting_.empty() || !preempted_.empty() || parked_.size() > 1)) {
    unpark_newest();
    admit();
  }
  if (!live_.empty()) return true;
  SPECULA_CHECK(idle(), "scheduler: nothing fits the KV pool (", limits_.kv_blocks, " blocks)");
  return false;
}

std::vector<Scheduler::Sequence*> Scheduler::plan_step() {
  // Oldest first within the row and prefill budgets; a sequence that does not fit waits.
  const int bs = shared_.kv_block_size;
  std::vector<Sequence*> plan;
  for (;;) {
    plan.clear();
    int rows_left = limits_.max_rows, prefill_left = limits_.prefill_tokens;
    for (const auto& p : live_) {
      Sequence& s = *p;
      s.feed = 0;
      if (s.spec) {
        const int rows = step_rows(s);
        if (rows > rows_left) continue;
        rows_left -= rows;
      } else {
        const int remaining = s.feed_target() - cache_.length(s.seq);
        const int n = std::min(remaining == 1 ? 1 : std::min(remaining, prefill_left), rows_left);
        if (n <= 0) continue;
        if (remaining > 1) prefill_left -= n;
        rows_left -= n;
        s.feed = n;
      }
      plan.push_back(&s);
    }
    int need = 0;
    for (const Sequence* s : plan) need += append_blocks(cache_.length(s->seq), s->spec ? step_rows(*s) : s->feed, bs);
    if (need <= cache_.stats().blocks_free()) return plan;
    if (live_.size() == 1 && !parked_.empty()) {
      unpark_newest();
      continue;
    }
    if (live_.size() == 1)
      throw ResourceExhausted(detail::concat("scheduler: one sequence alone needs ", need, " KV blocks, ",
                                             cache_.stats().blocks_free(), " free"));
    preempt(*live_.back());
  }
}

double Scheduler::expected_tokens(const Sequence& s) const {
  const Request& r = *s.request;
  if (s.spec) return expected_chain_tokens(r.alpha(), max_tree_nodes(r.options.draft));
  return cache_.length(s.seq) + s.feed == s.feed_target() && s.wants_logits() ? 1 : 0;
}

std::vector<std::optional<DraftBound>> Scheduler::plan_lengths(const std::vector<Sequence*>& plan) {
  // Each length policy plans its speculative sequences at once; the rest of the step it sees
  // as other rows and the tokens they are expected to bring.
  std::vector<int> rows;
  std::vector<double> tokens;
  std::vector<DraftLengthPolicy*> policies;
  for (const Sequence* s : plan) {
    rows.push_back(s->spec ? step_rows(*s) : s->feed);
    tokens.push_back(expected_tokens(*s));
    DraftLengthPolicy* policy = s->spec ? s->request->length_policy : nullptr;
    if (policy && std::find(policies.begin(), policies.end(), policy) == policies.end()) policies.push_back(policy);
  }
  const bool closed = waiting_.empty() && parked_.empty() && preempted_.empty();
  std::vector<std::optional<DraftBound>> bounds(plan.size());
  for (DraftLengthPolicy* policy : policies) {
    StepView step{static_cast<int>(plan.size()), 0, 0, closed};
    std::vector<SequenceView> views;
    std::vector<std::size_t> planned_at;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      Sequence& s = *plan[i];
      Request& r = *s.request;
      if (s.spec && r.length_policy == policy) {
        views.push_back({r.options.max_new_tokens - r.generated(s.sample), s.spec.get(), &r.options, &r.own, r.pool});
        planned_at.push_back(i);
      } else {
        step.other_rows += rows[i];
        step.other_tokens += tokens[i];
      }
    }
    std::vector<std::optional<DraftBound>> planned(views.size());
    policy->plan(step, views, planned);
    for (std::size_t j = 0; j < planned_at.size(); ++j) bounds[planned_at[j]] = planned[j];
  }
  return bounds;
}

std::vector<DeviceRounds> Scheduler::draft_phase(const std::vector<Sequence*>& plan,
                                                 const std::vector<std::optional<DraftBound>>& bounds,
                                                 StepOutcome& outcome) {
  const auto mark = Clock::now();
  std::vector<SpeculativeSequence*> specs;
  std::vector<DraftBound> drafting;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    SpeculativeSequence* spec = plan[i]->spec.get();
    if (!spec) continue;
    if (!bounds[i]) {
      spec->start_plain();
      continue;
    }
    specs.push_back(spec);
    drafting.push_back(*bounds[i]);
    outcome.deepest = std::max(outcome.deepest, bounds[i]->max_depth);
  }
  DeviceDrafting device;
  if (!specs.empty()) device = run_drafts(specs, drafting, &outcome.draft_calls, /*device_verify=*/true);
  stats_.device_drafted += device.chains;
  outcome.drafting = static_cast<int>(specs.size());
  outcome.draft_s = seconds(mark, Clock::now());
  return device.left;
}

void Scheduler::observe_lengths(const std::vector<Sequence*>& plan, const StepOutcome& outcome) {
  // The shared cost model sees every step (its figures are the steps' costs); a request's own
  // policy, the steps its sequences were in.
  cost_model_.observe(outcome);
  std::vector<DraftLengthPolicy*> seen{&cost_model_};
  for (const Sequence* s : plan) {
    DraftLengthPolicy* policy = s->spec ? s->request->length_policy : nullptr;
    if (!policy || std::find(seen.begin(), seen.end(), policy) != seen.end()) continue;
    policy->observe(outcome);
    seen.push_back(policy);
  }
}

std::vector<SequenceRows> Scheduler::target_rows(const std::vector<Sequence*>& plan) {
  std::vector<SequenceRows> parts;
  for (Sequence* s : plan) {
    if (s->spec) {
      parts.push_back(s->spec->verify_rows());
      continue;
    }
    const int cached = cache_.length(s->seq);
    s->positions.resize(static_cast<std::size_t>(s->feed));
    std::iota(s->positions.begin(), s->positions.end(), cached);
    const bool last = cached + s->feed == s->feed_target();
    parts.push_back({s->seq, std::span(s->tokens).subspan(static_cast<std::size_t>(cached), static_cast<std::size_t>(s->feed)),
                     s->positions, {}, last && s->wants_logits() ? RowLogits::kLast : RowLogits::kNone});
  }
  return parts;
}

void Scheduler::settle(Sequence& s, int rows, std::span<const float> logits, std::optional<DeviceVerdict>& verdict,
                       const StepTimes& times, Settled& settled) {
  Request& r = *s.request;
  if (r.counted_step != stats_.steps) {
    r.counted_step = stats_.steps;
    ++r.out.target_forwards;
    if (s.spec) {
      r.out.spec.draft_s += times.draft_s;
      r.out.spec.verify_forward_s += times.forward_s;
      if (verdict) r.out.spec.sample_verify_s += times.device_sample_verify_s;
      ++r.out.spec.target_forwards;
    }
  }
  r.out.target_rows += rows;
  bool complete = false;
  if (s.spec) {
    r.out.spec.target_rows += rows;
    const VerifyResult& result = verdict ? s.spec->commit_verdict(std::move(*verdict), r.out.spec)
                                         : s.spec->verify_and_commit(logits, r.out.spec);
    const ChainStep chain = s.spec->last_chain();
    for (ChainAcceptance* evidence : {&r.own, r.pool}) {
      evidence->add(chain.drafted, chain.accepted, r.options.draft.drafts_chain(), chain.stopped);
      if (chain.siblings > 0) evidence->add_siblings(chain.siblings, chain.sibling_accepted);
    }
    emit(s, result.tokens, complete, s.spec->last_logprobs());
  } else if (cache_.length(s.seq) < s.feed_target()) {
    return;  // a prefill chunk with more to come
  } else if (s.sample < 0) {
    settled.fed_roots.emplace_back(&s, logits);
  } else if (r.speculative()) {
    // Recomputed: the drafter catches up.
    make_speculative(s, r.new_draft_seq());
  } else {
    const std::size_t vocab = logits.size();
    std::vector<float> probs(vocab), edited;
    r.sampler->distribution(r.controls.edited(logits, s.tokens, {}, edited), probs);
    const int token = r.sampler->draw(probs, s.rng);
    s.tokens.push_back(token);
    const std::optional<TokenLogprob> logprob = r.logprob(logits, probs, token);
    emit(s, std::span(&token, 1), complete, logprob ? std::span(&*logprob, 1) : std::span<const TokenLogprob>());
  }
  if (complete) settled.done.push_back(&s);
}

void Scheduler::step() {
  if (!make_live()) return;
  const std::vector<Sequence*> plan = plan_step();
  StepOutcome outcome;
  const std::vector<DeviceRounds> left = draft_phase(plan, plan_lengths(plan), outcome);

  // ONE target forward with every planned sequence's rows.
  const std::vector<SequenceRows> parts = target_rows(plan);
  const std::size_t vocab = static_cast<std::size_t>(target_.config().vocab_size);
  std::vector<float> logits(static_cast<std::size_t>(logit_rows(parts)) * vocab);
  // The sequences the backend samples and verifies on its device (their logits stay there).
  std::vector<DeviceVerify> verify;
  std::vector<std::optional<DeviceVerdict>> verdicts(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (plan[i]->spec && plan[i]->spec->verifies_on_device()) {
      verify.push_back(plan[i]->spec->device_verify(static_cast<int>(i), plan[i]->request->options.sampling));
      verdicts[i].emplace();
    }
  std::vector<DeviceVerdict> device_verdicts(verify.size());
  const auto mark = Clock::now();
  const DeviceTimes device = context_.run(parts, logits, verify, device_verdicts);
  const double forward_s = seconds(mark, Clock::now());
  for (std::size_t k = 0; k < verify.size(); ++k)
    *verdicts[static_cast<std::size_t>(verify[k].part)] = std::move(device_verdicts[k]);
  // Rounds left on the draft device ran while the forward waited for them: their device time
  // is the draft's.
  double left_s = 0;
  for (const DeviceRounds& rounds : left) {
    const std::vector<double> round_s = rounds.draws->round_seconds();
    for (std::size_t r = 0; r < round_s.size(); ++r) {
      if (rounds.in_calls) outcome.draft_calls[rounds.first_call + r].seconds = round_s[r];
      left_s += round_s[r];
    }
  }
  outcome.draft_s += left_s;
  const StepTimes times{outcome.draft_s, std::max(0.0, forward_s - device.sample_verify_s - left_s),
                        device.sample_verify_s};
  const int rows = batch_rows(parts);
  ++stats_.steps;
  stats_.rows += rows;
  stats_.sequence_steps += static_cast<long>(plan.size());
  stats_.max_rows = std::max(stats_.max_rows, rows);
  stats_.max_sequences = std::max(stats_.max_sequences, static_cast<int>(plan.size()));
  stats_.draft_calls += static_cast<long>(outcome.draft_calls.size());
  stats_.device_verified += static_cast<long>(verify.size());
  stats_.device_chained +=
      std::count_if(verify.begin(), verify.end(), [](const DeviceVerify& v) { return v.draws != nullptr; });

  // Each sequence on its own: sample or verify, commit, emit.
  Settled settled;
  std::size_t row = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const std::size_t n = static_cast<std::size_t>(logit_rows(std::span(&parts[i], 1)));
    settle(*plan[i], static_cast<int>(parts[i].tokens.size()), std::span<const float>(logits).subspan(row * vocab, n * vocab),
           verdicts[i], times, settled);
    row += n;
  }
  outcome.rows = rows;
  outcome.seconds = seconds(mark, Clock::now());
  outcome.prefill = std::any_of(plan.begin(), plan.end(), [](const Sequence* s) { return s->feed > 1; });
  observe_lengths(plan, outcome);
  for (Sequence* s : settled.done) finish(*s);
  for (const auto& [root, root_logits] : settled.fed_roots) root_fed(*root, root_logits);
}

}  // namespace specula
