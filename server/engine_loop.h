// defines: EngineLoop, the one thread that owns the model store and the Scheduler of
// `specula serve`: HTTP handler threads enqueue parsed requests and cancellations, the loop
// submits and cancels them between steps, steps every live request together, streams each
// request's text to its Channel and releases what finished. Channel is one request's meeting
// point between the loop and the handler that waits on it; EngineMetrics the counters /metrics shows.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/model_store.h"
#include "runtime/scheduler.h"
#include "server/openai_request.h"

namespace specula::server {

// What a request's handler receives from the loop, in order: admission or a refusal, text
// deltas per choice, then the `specula generate --json` object of the finished request or a
// failure.
class Channel {
 public:
  struct Delta {
    int choice;
    std::string text;
    nlohmann::json logprobs;  // the delta's tokens' (choice_logprobs), null when not asked for
  };
  struct Update {
    std::vector<Delta> deltas;
    std::optional<nlohmann::json> result;
    std::optional<RequestError> failure;
  };

  // Blocks until the loop submitted the request (nullopt) or refused it (the refusal).
  std::optional<RequestError> wait_admitted();
  // Blocks up to `timeout` for deltas, the result or a failure; hands over what arrived.
  Update wait_update(std::chrono::milliseconds timeout);

  // The loop's side.
  void admit();
  void deliver(int choice, std::string text, nlohmann::json logprobs);
  void finish(nlohmann::json result);
  void fail(RequestError error);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool admitted_ = false;
  Update pending_;
};

struct EngineMetrics {
  long requests = 0;           // admitted by the scheduler
  long refused_full = 0;       // refused because the queue was full
  long cancelled = 0;          // cancelled before they finished (their client left, or the drain ended)
  long prompt_tokens = 0;      // of finished requests
  long generation_tokens = 0;  // of finished requests, over every choice
  long drafted_tokens = 0;     // speculation: tokens drafted by finished requests
  long accepted_tokens = 0;    // and of them accepted
  long drafts = 0;             // speculation: sequence steps of finished requests that verified a draft
  std::vector<long> accepted_per_position;  // [position - 1]: drafts whose accepted path reached it
  SchedulerStats scheduler;    // steps, rows and sequences over every step so far
  int queued = 0;              // requests waiting for their first step
  int running = 0;             // requests with a step taken and not finished
  int kv_blocks_in_use = 0;    // of the target's KV pool
};

class EngineLoop {
 public:
  // Loads the target of `base` (every request's settings before its own keys) and starts the
  // loop. `limits.kv_blocks` 0: room for max_sequences sequences of the target's whole
  // context. `max_queue`: requests enqueued and not finished at most.
  EngineLoop(GenerateOptions base, SchedulerLimits limits, int max_queue);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues `request`. Throws RequestError: 429 when max_queue requests are in, 503 once draining.
  std::shared_ptr<Channel> enqueue(CompletionRequest request);
  // Ends the request of `channel` at the next step (its client is gone).
  void cancel(const std::shared_ptr<Channel>& channel);

  // Refuses new requests from now on (503).
  void begin_drain();
  // Blocks until no request is in, or `deadline`; returns whether none is.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Cancels every request in; their handlers get a 503 failure.
  void cancel_all();

  EngineMetrics metrics() const;
  const Model& target() const { return *target_; }

 private:
  struct Active;
  void run();
  // Builds the options of `request` on the loop's thread and submits it; throws SpeculaError
  // or RequestError for a request the model or the scheduler refuses.
  void submit(const std::shared_ptr<Channel>& channel, const CompletionRequest& request);
  void settle_finished();
  void fail_all(const RequestError& error);

  GenerateOptions base_;
  SchedulerLimits limits_;
  int max_queue_;
  ModelStore models_;  // the loop's thread's alone once it runs
  const Model* target_ = nullptr;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<int, std::unique_ptr<Active>> active_;  // by scheduler index

  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable wake_, idle_;
  std::deque<std::pair<std::shared_ptr<Channel>, CompletionRequest>> submissions_;
  std::vector<std::shared_ptr<Channel>> cancels_;
  int in_ = 0;  // enqueued and not finished
  bool draining_ = false, cancel_all_ = false, stopping_ = false;
  EngineMetrics metrics_;

  std::thread thread_;
};

}  // namespace specula::server
