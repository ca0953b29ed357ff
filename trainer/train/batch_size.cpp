#include "trainer/train/batch_size.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "common/error.h"
#include "trainer/runtime/allocation_peak.h"
#include "trainer/runtime/memory.h"

namespace segtrain::trainer {
namespace {

// 90% of the device: the allocator's fragmentation, cuBLAS's and NCCL's workspaces and the
// evaluation's own passes live in the rest.
constexpr double kAutoBudgetShare = 0.9;

std::string gib(int64_t bytes) {
  std::ostringstream out;
  const double g = static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30);
  out << std::fixed << std::setprecision(g < 10 ? 2 : 1) << g << " GiB";
  return out.str();
}

std::string mib(int64_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / static_cast<double>(1 << 20) << " MiB";
  return out.str();
}

std::string ranks_text(int64_t ranks) { return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks"); }

// `forward_backward(size)`'s peak above what was held, or nullopt when it ran out of memory.
std::optional<int64_t> measure(const c10::Device& device, const std::function<void(int64_t)>& forward_backward,
                               int64_t size) {
  try {
    const AllocationPeak peak(device);
    forward_backward(size);
    return peak.bytes();
  } catch (const c10::OutOfMemoryError&) {
    release_cached_memory(device);
    return std::nullopt;
  }
}

}  // namespace

int64_t sequences_per_rank(const TrainConfig& train, int64_t ranks) {
  const int64_t global = train.global_batch_size.value_or(0);
  if (global % ranks != 0)
    throw InputError("train.global_batch_size: " + std::to_string(global) + " sequences do not divide over " +
                     ranks_text(ranks) + "; make it a multiple of " + std::to_string(ranks));
  return global / ranks;
}

BatchShape batch_shape(const TrainConfig& train, int64_t ranks, int64_t micro) {
  if (!train.global_batch_size) return {micro, train.grad_accum};
  const int64_t per_rank = sequences_per_rank(train, ranks);
  if (per_rank % micro != 0)
    throw InputError("train.global_batch_size: " + std::to_string(*train.global_batch_size) + " sequences over " +
                     ranks_text(ranks) + " leave " + std::to_string(per_rank) +
                     " a rank, not a multiple of train.micro_batch_size " + std::to_string(micro));
  return {micro, per_rank / micro};
}

MemoryFit MemoryFit::through(int64_t peak_of_one, int64_t peak_of_two) {
  // A second sequence never takes less than nothing: a pass that reused what the first freed counts 0.
  const int64_t per_sequence = std::max<int64_t>(peak_of_two - peak_of_one, 0);
  return {std::max<int64_t>(peak_of_one - per_sequence, 0), per_sequence};
}

std::vector<int64_t> micro_batch_candidates(int64_t sequences) {
  std::vector<int64_t> sizes;
  for (int64_t size = sequences; size >= 1; --size)
    if (sequences % size == 0) sizes.push_back(size);
  return sizes;
}

MemoryBudget memory_budget(const TrainConfig& train, const c10::Device& device) {
  if (train.batch_memory_gib)
    return {static_cast<int64_t>(*train.batch_memory_gib * static_cast<double>(int64_t{1} << 30)),
            "train.batch_memory_gib"};
  const auto total = device_memory_bytes(device);
  if (!total)
    throw std::runtime_error("train.micro_batch_size auto: the memory of " + device.str() +
                             " cannot be read; set train.batch_memory_gib");
  return {static_cast<int64_t>(kAutoBudgetShare * static_cast<double>(*total)),
          "90% of " + std::string(device.is_cuda() ? "the GPU's " : "the host's available ") + gib(*total)};
}

std::string MicroBatchChoice::describe() const {
  std::ostringstream out;
  out << micro_batch_size << " (measured: " << gib(held_bytes) << " held, a pass " << mib(fit.fixed_bytes) << " + "
      << mib(fit.per_sequence_bytes) << " a sequence, " << micro_batch_size << " sequences peak at "
      << gib(held_bytes + peak_bytes) << " of the budget " << gib(budget.bytes) << ", " << budget.source << ")";
  return out.str();
}

MicroBatchChoice choose_micro_batch(const c10::Device& device, int64_t sequences, const MemoryBudget& budget,
                                    const std::function<void(int64_t)>& forward_backward) {
  MicroBatchChoice choice;
  choice.budget = budget;
  choice.held_bytes = held_memory_bytes(device);
  const auto fits = [&](std::optional<int64_t> peak) { return peak && choice.held_bytes + *peak <= budget.bytes; };
  const auto one = measure(device, forward_backward, 1);
  if (!fits(one))
    throw std::runtime_error(
        "train.micro_batch_size auto: one sequence does not fit " + device.str() + ": the process holds " +
        gib(choice.held_bytes) + " and a pass of one sequence " + (one ? "adds " + gib(*one) : "ran out of memory") +
        ", over the budget of " + gib(budget.bytes) + " (" + budget.source +
        "); turn model.activation_checkpointing on, shorten data.train_length, or raise train.batch_memory_gib");
  const auto two = sequences >= 2 ? measure(device, forward_backward, 2) : std::nullopt;
  choice.fit = MemoryFit::through(*one, two.value_or(*one));
  if (!fits(two)) {  // one rank's share is 1, or two sequences are already over
    choice.micro_batch_size = 1;
    choice.peak_bytes = *one;
    return choice;
  }
  for (const int64_t size : micro_batch_candidates(sequences)) {
    if (size > 1 && choice.held_bytes + choice.fit.at(size) > budget.bytes) continue;  // the line says it cannot fit
    const auto peak = size == 1 ? one : size == 2 ? two : measure(device, forward_backward, size);
    if (!fits(peak)) continue;
    choice.micro_batch_size = size;
    choice.peak_bytes = *peak;
    return choice;
  }
  throw std::logic_error("choose_micro_batch: no size fits although two sequences do");  // 2 divides, or was not tried
}

}  // namespace segtrain::trainer
