#include "trainer/signals.h"

#include <csignal>

namespace segtrain::trainer {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop(int signal_number) { g_signal = signal_number; }

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signal() { return g_signal; }

}  // namespace segtrain::trainer
