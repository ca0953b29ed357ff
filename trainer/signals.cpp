#include "trainer/signals.h"

#include <unistd.h>

#include <csignal>

namespace segtrain::trainer {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop(int signal_number) { g_signal = signal_number; }

extern "C" void on_exit_now(int signal_number) { _exit(128 + signal_number); }

void install(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

void install_exit_handlers() { install(on_exit_now); }

void install_stop_handlers() { install(on_stop); }

int stop_signal() { return g_signal; }

}  // namespace segtrain::trainer
