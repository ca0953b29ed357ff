#pragma once
// SIGINT/SIGTERM end every command with exit code 128 + signal, never with death
// by the signal (docs/architecture.md, "Exit codes"). The command picks how,
// once, before it does any work:
//   exit_now           : exit at once. Output files are written atomically, so
//                        what an interrupted command leaves is whole or a .tmp- sibling.
//   stop_at_checkpoint : only note the signal; long-running work (a training run,
//                        an experiment grid) polls stop_signal() at its step
//                        boundaries, saves its state and throws Interrupted.
#include <signal.h>

#include <string>

namespace segtrain {

enum class OnSignal { exit_now, stop_at_checkpoint };

// `command` ("segtrain prepare") begins the line a stop that ends the process at once prints
// (ExitAtOnceOnSignal).
void install_signal_handlers(OnSignal mode, const std::string& command = "segtrain");

// 0 while no stop was requested, else the signal number (stop_at_checkpoint only).
int stop_signal();

// Throws Interrupted when a stop was requested.
void throw_if_stopped();

// While alive, SIGINT and SIGTERM end the process at once (exit 128 + signal) after one line on
// stderr, "<command>: error: interrupted by signal N" as a stop otherwise ends (the command that
// install_signal_handlers was given): for a long library
// call that cannot poll stop_signal() and leaves nothing half-written (sentencepiece's training,
// minutes on a large sample). A stop asked for before it begins is thrown (Interrupted); the
// handlers before it are back when it ends.
class ExitAtOnceOnSignal {
 public:
  ExitAtOnceOnSignal();
  ~ExitAtOnceOnSignal();
  ExitAtOnceOnSignal(const ExitAtOnceOnSignal&) = delete;
  ExitAtOnceOnSignal& operator=(const ExitAtOnceOnSignal&) = delete;

 private:
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_terminate_ {};
};

}  // namespace segtrain
