// defines: ServeOptions and serve(), the HTTP side of `specula serve` (cpp-httplib): the
// OpenAI routes POST /v1/completions and /v1/chat/completions (whole or streamed as server-sent
// events), GET /v1/models, /health and /metrics (Prometheus text), the API key check, and the
// drain on SIGTERM / SIGINT; and block_stop_signals(), which hands those signals to serve().
#pragma once

#include <ostream>
#include <string>

#include "server/engine_loop.h"

namespace specula::server {

// Most requests a server holds at once (--max-queue): each waits on a handler thread of its own.
inline constexpr int kMaxQueue = 4096;

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 0;          // 0: a free port, printed
  std::string api_key;   // set: every /v1/ route needs "Authorization: Bearer KEY"
  std::string model_name;  // the id /v1/models lists and requests must name
  int max_queue = 64;    // the engine's; the HTTP threads are sized from it
  double drain_seconds = 10;
};

// Blocks SIGTERM and SIGINT in the calling thread and so in every thread it starts after;
// serve() waits for them. Call before any thread starts.
void block_stop_signals();

// Listens on host:port, prints "specula serve: listening on http://HOST:PORT" on `out`, and
// serves until SIGTERM or SIGINT. Then it refuses new requests (503), lets the requests in
// finish for drain_seconds (a second signal ends the wait), cancels what is left, and returns 0.
// Throws SpeculaError when it cannot listen.
int serve(EngineLoop& engine, const ServeOptions& options, std::ostream& out);

}  // namespace specula::server
