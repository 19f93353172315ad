// defines: Scheduler, continuous (iteration-level) batching of generation requests over one
// target model: requests queue, and every step() is ONE target forward holding the rows of
// every live sequence (a prefill chunk, a plain decode row, or a speculative root and its
// tree), after which each sequence samples, verifies and commits on its own; finished
// sequences free their blocks at once and waiting requests join. RequestOutcome is what a
// request returns (tokens, times on the scheduler's clock, counters), SchedulerStats what the
// steps did. generate() is the scheduler with one request.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/cost_model_length.h"
#include "runtime/generate.h"
#include "runtime/scheduler_limits.h"
#include "runtime/speculative_sequence.h"
#include "text/stop_strings.h"

namespace specula {

struct RequestOutcome {
  std::vector<std::vector<int>> samples;  // new tokens of each sample (beam: the n-best)
  std::vector<std::vector<TokenLogprob>> logprobs;  // with options.logprobs: [sample][token] beside samples
  // With options.stop_strings: [sample] its text under the stop-string rule (cut before the
  // stop string it met).
  std::vector<StopStrings> texts;
  // Times in seconds on the scheduler's clock (Scheduler::now()).
  double submitted_s = 0;
  double started_s = 0;      // first admitted: its prefill began (queue wait = started - submitted)
  double prefilled_s = 0;    // its prompt is in the target's cache and the draft model's (when fed at admission)
  double first_token_s = 0;  // its first token was emitted
  double finished_s = 0;     // every sample complete, every block freed
  std::vector<double> token_s;  // when each of sample 0's tokens was emitted
  int target_forwards = 0;      // target forwards that held rows of this request
  int target_rows = 0;          // its rows in them
  int preemptions = 0;          // times one of its sequences was preempted (and later recomputed)
  int tokens_from_prompt = 0;   // new tokens drawn from the prefill's logits, not from a decode forward
  SpeculativeStats spec;        // speculative requests: drafts, acceptance; times are step wall times
  long draft_forwards = 0;
  nlohmann::json extra;         // beam search: its hypotheses' scores
  std::optional<KvStats> own_kv;  // beam search: its own cache's (it runs alone, outside the pool)
  bool done = false;
  bool cancelled = false;       // ended by Scheduler::cancel: its samples are what it had emitted
};

struct SchedulerStats {
  long steps = 0;           // target forwards (one per step; a beam request's own forwards too)
  long rows = 0;            // rows over all of them
  long sequence_steps = 0;  // sequences with rows, summed over steps (mean occupancy = / steps)
  int max_rows = 0;         // the most rows and live sequences one step held
  int max_sequences = 0;
  long preemptions = 0;
  long draft_calls = 0;     // batched draft forwards (one per draft cache and round)
  long device_verified = 0; // speculative sequence steps sampled and verified on the target's device
  long device_drafted = 0;  // speculative sequence steps whose chain or tree was drawn whole on a draft device (a draft
                            // model's, or Medusa heads' left there)
  long device_chained = 0;  // of those, the steps whose chain or tree went to the target's verification on the device
                            // without coming back first (one synchronisation for the step)
};

class Scheduler {
 public:
  // Requests run on the target of `shared` (model_dir, weights, backend, kv_block_size, threads: every
  // submitted request must agree on them). Throws SpeculaError for an invalid limit.
  Scheduler(ModelStore& models, const GenerateOptions& shared, SchedulerLimits limits);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates `options` (validate_generate_options, then check_request_fits) and queues it.
  // `key` names the request in its samples' Philox streams (seed, key, sample), so its tokens
  // never depend on what else runs. `arrived_s` (<= now(); < 0: now()) is when the request
  // arrived on the scheduler's clock, where its latencies start. Returns the request's index.
  int submit(const GenerateOptions& options, uint64_t key = 0, TokenSink sink = {}, double arrived_s = -1);

  // Ends request `request` between steps: it leaves the queue, its fed prompt and its live
  // and preempted sequences are dropped and their target and draft blocks freed; its outcome
  // keeps the tokens emitted so far (done, cancelled). A finished request is left as it is.
  void cancel(int request);

  bool idle() const;  // nothing queued, live or preempted
  // One step: admit what fits, plan the rows (preempting the newest sequences when the pool
  // cannot hold them), run the draft rounds and the target forward, then sample, verify and
  // commit each sequence. A beam request runs as one unit on its own when it is admitted.
  void step();
  void run() {
    while (!idle()) step();
  }

  // Throws SpeculaError for a request released by release().
  const RequestOutcome& outcome(int request) const;
  // Frees a finished request's record (its outcome, options and evidence of its own), for a
  // process that runs requests without end; its index is not reused. Throws SpeculaError for
  // an unfinished request.
  void release(int request);
  const SchedulerStats& stats() const { return stats_; }
  KvStats kv_stats() const;  // of the target pool
  int draft_blocks_in_use() const;  // over every draft pool
  int live_sequences() const { return static_cast<int>(live_.size()); }
  double now() const;        // seconds since construction

 private:
  struct Request;
  struct Sequence;
  struct DraftPool;
  struct HeadPool;
  struct MedusaPool;
  // What a chain's acceptance depends on besides the prompt: the drafter (method, draft model
  // and weights, n-gram sizes) and the sampling (strategy, temperature, top-k, top-p, min-p).
  using AcceptanceKey = std::tuple<int, std::string, std::string, int, int, int, float, int, float, float>;
  static AcceptanceKey acceptance_key(const GenerateOptions& o);

  struct StepTimes {
    double draft_s = 0;                 // the step's draft phase, with the device time of rounds left on the device
    double forward_s = 0;               // its target forward (host clock), less the device's sampling and
                                        // verification and the rounds it waited for
    double device_sample_verify_s = 0;  // that sampling and verification (events on the device's stream)
  };
  // What settling a step's sequences leaves to do once all are settled.
  struct Settled {
    std::vector<Sequence*> done;                                           // complete samples
    std::vector<std::pair<Sequence*, std::span<const float>>> fed_roots;  // prompts fed, [rows, vocab] logits
  };

  // One step's phases, in order.
  bool make_live();
  std::vector<Sequence*> plan_step();
  // The length policies' first point: each speculative sequence's bound (nullopt: a plain step).
  std::vector<std::optional<DraftBound>> plan_lengths(const std::vector<Sequence*>& plan);
  // Returns the rounds left on the draft device for the target's verification (their
  // outcome.draft_calls get their seconds once the forward has returned).
  std::vector<DeviceRounds> draft_phase(const std::vector<Sequence*>& plan,
                                        const std::vector<std::optional<DraftBound>>& bounds, StepOutcome& outcome);
  std::vector<SequenceRows> target_rows(const std::vector<Sequence*>& plan);
  // Samples or verifies, commits and emits for `s`, which fed `rows` rows and got `logits`, or
  // commits the `verdict` its device verification gave.
  void settle(Sequence& s, int rows, std::span<const float> logits, std::optional<DeviceVerdict>& verdict,
              const StepTimes& times, Settled& settled);
  // The length policies' second point: what the step did.
  void observe_lengths(const std::vector<Sequence*>& plan, const StepOutcome& outcome);
  // The tokens `s`'s rows this step are expected to bring (a plain prefill chunk's: none).
  double expected_tokens(const Sequence& s) const;

  void admit();
  void fork_samples(Request& r);
  void start_root(Request& r);
  void root_fed(Sequence& root, std::span<const float> logits);
  // Appends what of `tokens` the request takes (emit_token: EOS, max_new_tokens; then a stop
  // string) to the sample's output, with the matching entries of `logprobs` (one per token,
  // or empty).
  void emit(Sequence& s, std::span<const int> tokens, bool& done, std::span<const TokenLogprob> logprobs = {});
  void preempt(Sequence& s);
  void finish(Sequence& s);
  void free_blocks(Sequence& s);  // its target and draft sequences (a preempted one holds none)
  void drop_root(Request& r);     // the fed prompt's target and draft sequences and logits
  void make_speculative(Sequence& s, KvCache::SeqId draft_seq);
  void unpark_newest();
  // The drafter of a sample whose target sequence is `target_seq` and whose sequence in its
  // drafter's cache (a draft model's or a head's) is `draft_seq`.
  std::unique_ptr<Drafter> make_drafter(Request& r, KvCache::SeqId target_seq, KvCache::SeqId draft_seq, int gamma);
  DraftPool& draft_pool(const DraftOptions& d);
  // The head's pool; its first use makes the target cache keep the head's tap layers.
  HeadPool& head_pool(const DraftOptions& d);
  // The Medusa heads' pool; its first use makes the target cache keep the last layer's states.
  MedusaPool& medusa_pool(const DraftOptions& d);
  // Makes the target cache keep `layers` (`width` floats a slot) for the head in `owner`: the
  // cache holds one store, so a head that taps other layers than the store's is refused.
  void keep_states(const std::vector<int>& layers, int width, const std::string& owner);
  int headroom() const;  // free blocks less the live sequences' next-step needs
  int step_rows(const Sequence& s) const;
  void run_beam(Request& r);

  ModelStore& models_;
  GenerateOptions shared_;
  SchedulerLimits limits_;
  const Backend& target_;
  KvCache cache_;
  std::unique_ptr<Workspace> workspace_;
  ForwardContext context_;
  std::map<std::pair<std::string, std::optional<MatrixFormat>>, std::unique_ptr<DraftPool>> draft_pools_;
  std::map<std::string, std::unique_ptr<HeadPool>> head_pools_;
  std::map<std::string, std::unique_ptr<MedusaPool>> medusa_pools_;
  std::string states_owner_;  // the head whose tap layers the target cache keeps
  std::vector<std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;                     // submitted, not started, in arrival order
  std::vector<Request*> parked_;                     // prompt fed, samples still to fork
  std::vector<std::unique_ptr<Sequence>> live_;      // admission order: the newest is last
  std::vector<std::unique_ptr<Sequence>> preempted_; // oldest first: resumed in that order
  long next_order_ = 0;
  std::map<AcceptanceKey, ChainAcceptance> acceptance_;  // pooled over the requests of each key
  CostModelLength cost_model_;  // shared by every request of draft.gamma_policy = "load"
  SchedulerStats stats_;
  std::chrono::steady_clock::time_point start_;
};

// The limits generate() runs a lone request under: its samples side by side, kSampleWave at
// most, in a pool sized for them.
SchedulerLimits single_request_limits(const GenerateOptions& options);

// The object `specula generate --json` prints for one request: {"ids", "text", "samples"?,
// "stats"} (stats of `kv`, the target pool, or of the outcome's own cache where it has one,
// and draft_blocks_in_use, the draft pools).
nlohmann::json request_json(const Model& target, const GenerateOptions& options, const RequestOutcome& outcome,
                            const KvStats& kv, int draft_blocks_in_use);

}  // namespace specula
