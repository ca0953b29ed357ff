#pragma once
// How many sequences a step takes and how they go through the model: train.micro_batch_size,
// train.grad_accum and train.global_batch_size resolved for a run's ranks, and
// micro_batch_size auto: the largest micro-batch that divides a rank's share of the global
// batch and whose measured peak memory fits the budget (train.batch_memory_gib).
//
// auto measures, not models: forward and backward at 1 (after a first pass at 1 that makes
// what a run makes once) and 2 sequences give the peak as a
// line in the micro-batch size (what the model, optimizer state and gradients hold, plus what
// each sequence's activations add, whatever checkpointing, loss slicing or attention kernel
// the run takes); the largest size the line fits is then measured itself, and a smaller one
// taken while it does not fit (or runs out of memory), because allocators do not add up exactly.
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/config.h"

namespace segtrain::trainer {

struct BatchShape {
  int64_t micro_batch_size = 0;  // sequences per forward pass and rank
  int64_t grad_accum = 0;        // micro-batches per optimizer step
  int64_t global(int64_t ranks) const { return micro_batch_size * grad_accum * ranks; }
};

// A rank's sequences a step under train.global_batch_size; InputError naming the key when the
// ranks do not divide it.
int64_t sequences_per_rank(const TrainConfig& train, int64_t ranks);

// The step of `micro` sequences a pass: grad_accum as configured, or what train.global_batch_size
// leaves over micro x ranks (InputError naming the key when that does not divide it).
BatchShape batch_shape(const TrainConfig& train, int64_t ranks, int64_t micro);

// Peak memory as a line in the micro-batch size, from the peaks measured at 1 and 2 sequences.
struct MemoryFit {
  int64_t fixed_bytes = 0;         // what a pass holds whatever its size (gradients, the loss's slices)
  int64_t per_sequence_bytes = 0;  // what each sequence adds (activations)
  int64_t at(int64_t sequences) const { return fixed_bytes + per_sequence_bytes * sequences; }
  static MemoryFit through(int64_t peak_of_one, int64_t peak_of_two);
};

// The sizes that divide `sequences` evenly, largest first.
std::vector<int64_t> micro_batch_candidates(int64_t sequences);

struct MemoryBudget {
  int64_t bytes = 0;
  std::string source;  // how it was set, for the plan line: "train.batch_memory_gib", "90% of the GPU's 79.2 GiB"
};

// train.batch_memory_gib, or 90% of the device's memory (runtime/memory.h, device_memory_bytes),
// the host's shared by the `ranks_on_host` processes on it on the CPU; a runtime error where the
// device's memory cannot be read.
MemoryBudget memory_budget(const TrainConfig& train, const c10::Device& device, int64_t ranks_on_host = 1);

struct MicroBatchChoice {
  int64_t micro_batch_size = 0;
  MemoryFit fit;
  int64_t held_bytes = 0;  // what the process held before the first pass (weights, optimizer state)
  int64_t left_bytes = 0;  // what its passes left held (a workspace, a table): later passes hold it too
  int64_t peak_bytes = 0;  // the chosen size's peak, all the process held then included
  bool peak_measured = true;  // false: another rank's smaller choice, its peak read off the line
  MemoryBudget budget;
  std::string describe() const;  // "4 (measured: 1.2 GiB held + 96 MiB + 310 MiB a sequence; ...)"
};

// The largest of micro_batch_candidates(sequences) whose pass `forward_backward(size)` peaks
// within the budget on `device` (what the process held as the pass began, and the pass's peak
// above it: a workspace an earlier pass left counts), measured as the header says. A pass that
// runs out of memory (c10::OutOfMemoryError) counts as over. A runtime error (exit 1) when one
// sequence does not fit.
MicroBatchChoice choose_micro_batch(const c10::Device& device, int64_t sequences, const MemoryBudget& budget,
                                    const std::function<void(int64_t)>& forward_backward);

// model.activation_checkpointing auto: the fewest blocks, from the first, that recompute in backward
// such that a step fits the budget, measured as micro_batch_size auto measures: forward and backward
// with every block recomputed, with the last block's activations kept (about the same: a recomputed
// block's activations exist while backward is in it) and with the last two's give what each further
// block that keeps its activations adds, a line in the blocks kept; the fewest the line allows is then
// measured itself, and where it does not fit (or runs out of memory), more are recomputed, halving
// the interval to the last pass that fit.
struct CheckpointingChoice {
  int64_t blocks = 0;       // the first `blocks` recompute
  int64_t of = 0;           // the model's blocks
  int64_t held_bytes = 0;   // what the process held before the first pass
  int64_t every_bytes = 0;  // a pass's peak above that with every block recomputed
  int64_t every_peak_bytes = 0;  // that pass's peak, what earlier passes left held included
  std::optional<int64_t> last_kept_bytes;   // with the last block's activations kept (nullopt: not measured)
  std::optional<int64_t> kept_block_bytes;  // what each further block that keeps its activations adds
  int64_t peak_bytes = 0;   // the choice's peak, all the process held then included
  bool peak_measured = true;  // false: another rank's larger choice, its peak read off the line
  MemoryBudget budget;
  std::string describe() const;  // "20 of 32 blocks (measured: 1.2 GiB held, ...)"
};

// `forward_backward(k)`: one micro-batch's pass with the first k blocks recomputed. `held`: what the
// process holds, where micro_batch_size auto measured first (its held_bytes and left_bytes: the CPU's
// resident set keeps what earlier passes freed); else read now. A runtime error (exit 1)
// when a pass with every block recomputed does not fit.
CheckpointingChoice choose_checkpointed_blocks(const c10::Device& device, int64_t blocks, const MemoryBudget& budget,
                                               const std::function<void(int64_t)>& forward_backward,
                                               std::optional<int64_t> held = std::nullopt);

}  // namespace segtrain::trainer
