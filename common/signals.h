#pragma once
// SIGINT/SIGTERM end every command with exit code 128 + signal, never with death
// by the signal (docs/architecture.md, "Exit codes"). The command picks how,
// once, before it does any work:
//   exit_now           : exit at once. Output files are written atomically, so
//                        what an interrupted command leaves is whole or a .tmp- sibling.
//   stop_at_checkpoint : only note the signal; long-running work (a training run,
//                        an experiment grid) polls stop_signal() at its step
//                        boundaries, saves its state and throws Interrupted.
namespace segtrain {

enum class OnSignal { exit_now, stop_at_checkpoint };

void install_signal_handlers(OnSignal mode);

// 0 while no stop was requested, else the signal number (stop_at_checkpoint only).
int stop_signal();

// Throws Interrupted when a stop was requested.
void throw_if_stopped();

}  // namespace segtrain
