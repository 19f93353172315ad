#include "experiments/interrupt.h"

#include <csignal>

namespace specula {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
struct sigaction g_previous_int, g_previous_term;

void on_signal(int) { g_interrupted = 1; }

}  // namespace

InterruptGuard::InterruptGuard() {
  g_interrupted = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;  // once: the next signal has its default effect
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  g_interrupted = 0;
}

bool interrupted() { return g_interrupted != 0; }

}  // namespace specula
