#pragma once
// What every rank must agree on once a step's backward is done: whether to
// stop (a signal on any rank), whether a checkpoint in flight is written, how many loss tokens the step had, its summed
// loss and its gradient's norm. All of it goes into ONE reduction over the
// ranks and is read on the host ONCE: the step's only host round trip. On a
// GPU that read is the only point of a step where the host waits for the
// device; the loss, the norm and the clipping stay on the device until then.
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "trainer/train/checkpoint_writer.h"
#include "trainer/train/distributed.h"

namespace segtrain::trainer {

// One rank's part of a step.
struct StepShare {
  int signal = 0;                    // stop_signal() of this rank (0: none)
  int64_t loss_tokens = 0;           // counted on the host batch
  at::Tensor loss_sum;               // fp64 scalar on the device: summed cross-entropy
  at::Tensor grad_square_sum;        // fp64 scalar on the device, this rank's share of the whole
  SavePart save = SavePart::none;    // this rank's part of a checkpoint save in flight
  // A mixture's split by source (StepShare from LocalTotals): fp64 [sources] on the device,
  // undefined when not counted (every rank alike), and the loss tokens, from the host batches.
  at::Tensor source_loss_sums;
  std::vector<int64_t> source_loss_tokens;
};

// The whole step, the same on every rank.
struct StepTotals {
  int stop_signal = 0;  // SIGTERM when any rank has it, else SIGINT when any has it, else 0
  int64_t loss_tokens = 0;
  double loss_sum = 0;
  double grad_square_sum = 0;  // of the summed (not yet token-normalized) gradient
  int64_t saves_written = 0;   // ranks whose part of the save in flight is written
  int64_t saves_failed = 0;    // ranks whose part failed
  std::vector<double> source_loss_sums;     // a mixture's, each source's; empty when not counted
  std::vector<int64_t> source_loss_tokens;
};

// Sums the ranks' shares (`group` nullptr: this process is the whole run).
StepTotals reduce_step_totals(ProcessGroup* group, const StepShare& share, const c10::Device& device);

}  // namespace segtrain::trainer
