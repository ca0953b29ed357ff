#pragma once
// SIGINT/SIGTERM only raise a flag; the training loop checkpoints at the next
// step boundary and exits with 128 + signal (DESIGN.md exit codes).
namespace segtrain::trainer {

void install_stop_handlers();
// 0 while no stop was requested, else the signal number.
int stop_signal();

}  // namespace segtrain::trainer
