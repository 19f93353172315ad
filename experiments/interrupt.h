// defines: InterruptGuard and interrupted(), how `specula run` stops cleanly: while a guard
// lives, SIGINT and SIGTERM only set a flag, which the runner checks between jobs (a job's
// results line is written whole or not at all); a second signal ends the process at once.
#pragma once

namespace specula {

class InterruptGuard {
 public:
  InterruptGuard();   // installs the handlers and clears the flag
  ~InterruptGuard();  // restores the previous handlers and clears the flag
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// Whether SIGINT or SIGTERM arrived while a guard was alive.
bool interrupted();

// The exit status of a run stopped by a signal (128 + SIGINT, as shells report it).
inline constexpr int kInterruptedExit = 130;

}  // namespace specula
