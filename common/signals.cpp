#include "common/signals.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "common/error.h"

namespace segtrain {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop(int signal_number) { g_signal = signal_number; }

extern "C" void on_exit_now(int signal_number) { _exit(128 + signal_number); }

// ExitAtOnceOnSignal's line, formatted before any signal: a handler may only write() it.
char g_exit_line[256];
size_t g_exit_line_size = 0;

void set_exit_line(const std::string& command) {
  const std::string start = (command + ": error: interrupted by signal ").substr(0, sizeof g_exit_line);
  std::copy(start.begin(), start.end(), g_exit_line);
  g_exit_line_size = start.size();
}

extern "C" void on_exit_with_line(int signal_number) {
  char digits[4];
  size_t n = 0;
  for (int v = signal_number; n < sizeof digits && (v > 0 || n == 0); v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  char line[sizeof g_exit_line + sizeof digits + 1];
  size_t size = 0;
  for (size_t i = 0; i < g_exit_line_size; ++i) line[size++] = g_exit_line[i];
  while (n > 0) line[size++] = digits[--n];
  line[size++] = '\n';
  (void)!write(STDERR_FILENO, line, size);
  _exit(128 + signal_number);
}

}  // namespace

void install_signal_handlers(OnSignal mode, const std::string& command) {
  set_exit_line(command);
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

ExitAtOnceOnSignal::ExitAtOnceOnSignal() {
  if (g_exit_line_size == 0) set_exit_line("segtrain");  // handlers never installed (a test)
  struct sigaction action {};
  action.sa_handler = on_exit_with_line;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);  // one line, whichever signal came first
  sigaddset(&action.sa_mask, SIGTERM);
  sigaction(SIGINT, &action, &previous_interrupt_);
  sigaction(SIGTERM, &action, &previous_terminate_);
  // A stop noted before the handler above took over is ended as any other.
  if (const int signal = g_signal) {
    sigaction(SIGINT, &previous_interrupt_, nullptr);
    sigaction(SIGTERM, &previous_terminate_, nullptr);
    throw Interrupted(signal);
  }
}

ExitAtOnceOnSignal::~ExitAtOnceOnSignal() {
  sigaction(SIGINT, &previous_interrupt_, nullptr);
  sigaction(SIGTERM, &previous_terminate_, nullptr);
}

}  // namespace segtrain
