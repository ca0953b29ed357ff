#pragma once
// Exit codes 130/143 for SIGINT/SIGTERM (DESIGN.md), never death by the signal.
namespace segtrain::trainer {

// Every command: exit at once with 128 + signal. Output files are written
// atomically, so what an interrupted command leaves is whole or a .tmp- sibling.
void install_exit_handlers();

// Training: only raise a flag; the loop checkpoints at the next step boundary
// (or after the evaluation in progress) and then exits with 128 + signal.
void install_stop_handlers();
// 0 while no stop was requested, else the signal number.
int stop_signal();

}  // namespace segtrain::trainer
