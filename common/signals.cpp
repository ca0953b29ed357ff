#include "common/signals.h"

#include <unistd.h>

#include <csignal>

#include "common/error.h"

namespace segtrain {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop(int signal_number) { g_signal = signal_number; }

extern "C" void on_exit_now(int signal_number) { _exit(128 + signal_number); }

}  // namespace

void install_signal_handlers(OnSignal mode) {
  struct sigaction action {};
  action.sa_handler = mode == OnSignal::exit_now ? on_exit_now : on_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signal() { return g_signal; }

void throw_if_stopped() {
  if (const int signal = g_signal) throw Interrupted(signal);
}

}  // namespace segtrain
