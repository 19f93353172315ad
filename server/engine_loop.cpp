#include "server/engine_loop.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <utility>

#include "base/error.h"
#include "experiments/engine_backend.h"
#include "experiments/prompt_options.h"
#include "runtime/generate.h"
#include "server/openai_response.h"
#include "text/stop_strings.h"

namespace specula::server {
namespace {

// How validation names a setting of `request`: the body field that set it, else the server's.
OptionNames request_names(const CompletionRequest& request) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  OptionNames names;
  names.name = [fields = request.key_fields, chat](std::string_view key) -> std::string {
    if (const auto it = fields.find(key); it != fields.end()) return it->second;
    if (key == "prompt") return chat ? "messages" : "prompt";
    if (key == "run.num_samples") return "n";
    if (key == "run.seeds") return "seed";
    if (key == "run.kv_pool_blocks") return "the server's --kv-pool-blocks";
    if (key == "run.kv_block_size") return "the server's --kv-block-size";
    if (key == "run.threads") return "the server's --threads";
    return "the server's " + std::string(key);
  };
  names.given = [fields = request.key_fields](std::string_view key) { return fields.contains(key); };
  return names;
}

// A refusal of apply_prompt_options, which names a key "options.KEY", named by the body field
// that set the key instead.
RequestError renamed(std::string_view message, const CompletionRequest& request) {
  constexpr std::string_view kPrefix = "options";
  if (!message.starts_with(kPrefix)) return RequestError(400, std::string(message));
  const std::string_view rest = message.substr(kPrefix.size());
  for (const auto& [key, field] : request.key_fields) {
    const std::string dotted = "." + key;
    if (rest.starts_with(dotted) && (rest.size() == dotted.size() || rest[dotted.size()] == ' '))
      return RequestError(400, field + std::string(rest.substr(dotted.size())), field);
  }
  return RequestError(400, "specula" + std::string(rest), "specula");
}

}  // namespace

std::optional<RequestError> Channel::wait_admitted() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return admitted_ || pending_.failure; });
  if (admitted_) return std::nullopt;
  return std::exchange(pending_.failure, std::nullopt);
}

Channel::Update Channel::wait_update(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [this] { return !pending_.deltas.empty() || pending_.result || pending_.failure; });
  return std::exchange(pending_, Update{});
}

void Channel::admit() {
  {
    std::lock_guard lock(mutex_);
    admitted_ = true;
  }
  changed_.notify_all();
}

void Channel::deliver(int choice, std::string text, nlohmann::json logprobs) {
  {
    std::lock_guard lock(mutex_);
    pending_.deltas.push_back({choice, std::move(text), std::move(logprobs)});
  }
  changed_.notify_all();
}

void Channel::finish(nlohmann::json result) {
  {
    std::lock_guard lock(mutex_);
    pending_.result = std::move(result);
  }
  changed_.notify_all();
}

void Channel::fail(RequestError error) {
  {
    std::lock_guard lock(mutex_);
    pending_.failure = std::move(error);
  }
  changed_.notify_all();
}

// A request the scheduler holds. Streaming requests keep each choice's tokens and text under
// the stop-string rule, to send what of the text is final as it is, and the logprobs of the
// tokens whose text is not all sent yet: a token's logprobs go out with the last of its text.
struct EngineLoop::Active {
  std::shared_ptr<Channel> channel;
  CompletionRequest request;
  GenerateOptions options;
  bool stream = false;
  std::vector<std::vector<int>> ids;        // [choice]
  std::vector<StopStrings> texts;           // [choice]
  std::vector<std::size_t> fed;             // [choice] bytes its tokens' texts hold
  std::vector<std::deque<LogprobToken>> held;  // [choice] logprobs not sent, oldest first

  // Sends choice `sample`'s text released since `before` bytes with the logprobs of the
  // tokens whose text is all released, if either is new. `final` (the choice ended): also
  // the logprobs of the rest that logprobs_hold keeps, the whole response's.
  void deliver_since(int sample, std::size_t before, bool final) {
    const auto s = static_cast<std::size_t>(sample);
    const StopStrings& text = texts[s];
    const std::size_t released = text.released();
    std::deque<LogprobToken>& pending = held[s];
    std::vector<LogprobToken> tokens;
    while (!pending.empty() && (pending.front().offset + pending.front().text.size() <= released ||
                                (final && logprobs_hold(pending.front(), released, text.matched().has_value())))) {
      tokens.push_back(std::move(pending.front()));
      pending.pop_front();
    }
    if (final) pending.clear();
    if (released == before && tokens.empty()) return;
    channel->deliver(sample, std::string(text.text().substr(before, released - before)),
                     options.logprobs ? choice_logprobs(request, tokens, *options.logprobs) : nlohmann::json());
  }
};

EngineLoop::EngineLoop(GenerateOptions base, SchedulerLimits limits, int max_queue)
    : base_(std::move(base)), limits_(limits), max_queue_(max_queue) {
  SPECULA_CHECK(max_queue_ >= 1, "--max-queue must be >= 1, got ", max_queue_);
  target_ = &models_.model(base_.model_dir);
  if (limits_.kv_blocks == 0) {
    const long long blocks = kv_blocks_for(0, target_->config().max_position_embeddings, limits_.max_sequences,
                                           base_.kv_block_size);
    limits_.kv_blocks = static_cast<int>(std::min<long long>(blocks, INT_MAX));
  }
  if (base_.draft.method == DraftMethod::kModel) models_.get(base_.draft.model_dir, base_.draft.weights);
  if (drafts_with_eagle_head(base_.draft.method))
    models_.head(base_.draft.model_dir, base_.model_dir, base_.backend, head_kind(base_.draft.method));
  if (base_.draft.method == DraftMethod::kMedusa) models_.medusa(base_.draft.model_dir, base_.model_dir, base_.backend);
  scheduler_ = std::make_unique<Scheduler>(models_, base_, limits_);
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = draining_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<Channel> EngineLoop::enqueue(CompletionRequest request) {
  auto channel = std::make_shared<Channel>();
  {
    std::lock_guard lock(mutex_);
    if (draining_) throw RequestError(503, "the server is shutting down", "", "server_error");
    if (in_ >= max_queue_) {
      ++metrics_.refused_full;
      throw RequestError(429,
                         "the server's queue is full (" + std::to_string(in_) + " requests, --max-queue " +
                             std::to_string(max_queue_) + "); retry later",
                         "", "rate_limit_error");
    }
    ++in_;
    submissions_.emplace_back(channel, std::move(request));
  }
  wake_.notify_all();
  return channel;
}

void EngineLoop::cancel(const std::shared_ptr<Channel>& channel) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(channel);
  }
  wake_.notify_all();
}

void EngineLoop::begin_drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
}

bool EngineLoop::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return idle_.wait_until(lock, deadline, [this] { return in_ == 0; });
}

void EngineLoop::cancel_all() {
  {
    std::lock_guard lock(mutex_);
    cancel_all_ = true;
  }
  wake_.notify_all();
}

EngineMetrics EngineLoop::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void EngineLoop::submit(const std::shared_ptr<Channel>& channel, const CompletionRequest& request) {
  GenerateOptions o = base_;
  o.seed = request.seed;
  o.num_samples = request.n;
  try {
    o.prompt_ids = prompt_token_ids(models_, base_.model_dir, request.prompt);
  } catch (const SpeculaError& e) {
    throw RequestError(400, e.what(), request.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt");
  }
  try {
    apply_prompt_options(request.keys, o, std::filesystem::current_path(), "on the server's command line");
  } catch (const SpeculaError& e) {
    throw renamed(e.what(), request);
  }
  validate_generate_options(models_, o, request_names(request));

  auto active = std::make_unique<Active>();
  Active& a = *active;
  a.channel = channel;
  a.request = request;
  a.options = o;
  a.stream = request.stream;
  TokenSink sink;
  if (a.stream) {
    a.ids.resize(static_cast<std::size_t>(o.num_samples));
    a.texts.assign(static_cast<std::size_t>(o.num_samples), StopStrings(o.stop_strings));
    a.fed.assign(static_cast<std::size_t>(o.num_samples), 0);
    a.held.resize(static_cast<std::size_t>(o.num_samples));
    sink = [this, &a](int sample, int token, const TokenLogprob* logprob) {
      const auto s = static_cast<std::size_t>(sample);
      StopStrings& text = a.texts[s];
      if (text.matched()) return;
      std::vector<int>& ids = a.ids[s];
      const std::size_t before = text.released();
      const std::string piece = target_->tokenizer().decode_piece(ids, token);
      if (logprob) a.held[s].push_back(logprob_token(target_->tokenizer(), ids, *logprob, a.fed[s]));
      a.fed[s] += piece.size();
      text.feed(piece);
      ids.push_back(token);
      a.deliver_since(sample, before, text.matched().has_value());
    };
  }
  const int index = scheduler_->submit(o, 0, std::move(sink));
  active_[index] = std::move(active);
  {
    std::lock_guard lock(mutex_);
    ++metrics_.requests;
  }
  channel->admit();
}

void EngineLoop::settle_finished() {
  for (auto it = active_.begin(); it != active_.end();) {
    const RequestOutcome& out = scheduler_->outcome(it->first);
    if (!out.done) {
      ++it;
      continue;
    }
    Active& a = *it->second;
    if (out.cancelled) {
      {
        std::lock_guard lock(mutex_);
        ++metrics_.cancelled;
      }
      a.channel->fail(RequestError(503, "the request was cancelled: the server is shutting down", "", "server_error"));
    } else {
      for (std::size_t s = 0; s < a.texts.size(); ++s) {  // streaming: the held-back tails are final now
        StopStrings& text = a.texts[s];
        if (text.matched()) continue;
        const std::size_t before = text.released();
        text.end();
        a.deliver_since(static_cast<int>(s), before, true);
      }
      long generated = 0;
      for (const std::vector<int>& ids : out.samples) generated += static_cast<long>(ids.size());
      {
        std::lock_guard lock(mutex_);
        metrics_.prompt_tokens += static_cast<long>(a.options.prompt_ids.size());
        metrics_.generation_tokens += generated;
        metrics_.drafted_tokens += out.spec.drafted;
        metrics_.accepted_tokens += out.spec.accepted;
        metrics_.drafts += out.spec.steps;
        std::vector<long>& per_position = metrics_.accepted_per_position;
        if (per_position.size() < out.spec.accepted_at_depth.size()) per_position.resize(out.spec.accepted_at_depth.size());
        for (std::size_t d = 0; d < out.spec.accepted_at_depth.size(); ++d) per_position[d] += out.spec.accepted_at_depth[d];
      }
      a.channel->finish(request_json(*target_, a.options, out, scheduler_->kv_stats(), scheduler_->draft_blocks_in_use()));
    }
    scheduler_->release(it->first);
    it = active_.erase(it);
    {
      std::lock_guard lock(mutex_);
      --in_;
    }
    idle_.notify_all();
  }
}

void EngineLoop::fail_all(const RequestError& error) {
  for (auto& [index, a] : active_) a->channel->fail(error);
  {
    std::lock_guard lock(mutex_);
    in_ -= static_cast<int>(active_.size());
  }
  active_.clear();
  idle_.notify_all();
}

void EngineLoop::run() {
  omp_set_num_threads(request_threads(base_));  // OpenMP's thread count is this thread's own
  for (;;) {
    std::deque<std::pair<std::shared_ptr<Channel>, CompletionRequest>> submissions;
    std::vector<std::shared_ptr<Channel>> cancels;
    bool cancel_everything = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] {
        return !submissions_.empty() || !cancels_.empty() || cancel_all_ || stopping_ || !active_.empty();
      });
      if (stopping_ && submissions_.empty() && active_.empty()) return;
      submissions.swap(submissions_);
      cancels.swap(cancels_);
      cancel_everything = std::exchange(cancel_all_, false) || stopping_;
    }
    for (auto& [channel, request] : submissions) {
      std::optional<RequestError> refusal;
      try {
        submit(channel, request);
      } catch (const RequestError& e) {
        refusal = e;
      } catch (const SpeculaError& e) {
        refusal = RequestError(400, e.what());
      }
      if (refusal) {
        channel->fail(*refusal);
        std::lock_guard lock(mutex_);
        --in_;
      }
    }
    for (const std::shared_ptr<Channel>& channel : cancels)
      for (const auto& [index, a] : active_)
        if (a->channel == channel) scheduler_->cancel(index);
    if (cancel_everything)
      for (const auto& [index, a] : active_) scheduler_->cancel(index);
    if (!scheduler_->idle()) {
      try {
        scheduler_->step();
      } catch (const std::exception& e) {
        fail_all(RequestError(500, std::string("the engine failed: ") + e.what(), "", "server_error"));
        scheduler_ = std::make_unique<Scheduler>(models_, base_, limits_);
      }
    }
    settle_finished();
    int queued = 0;
    for (const auto& [index, a] : active_) queued += scheduler_->outcome(index).started_s == 0 ? 1 : 0;
    std::lock_guard lock(mutex_);
    metrics_.queued = queued + static_cast<int>(submissions_.size());
    metrics_.running = static_cast<int>(active_.size()) - queued;
    metrics_.scheduler = scheduler_->stats();
    metrics_.kv_blocks_in_use = scheduler_->kv_stats().blocks_in_use;
  }
}

}  // namespace specula::server
