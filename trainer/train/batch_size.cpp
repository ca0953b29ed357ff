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

// What a pass of `size` sequences took: its peak above what was held as it began, and the
// process's whole peak (the figure the budget is held to): `held` before the first pass, what
// earlier passes left (a workspace, a cache: the growth of the watch's start since the first
// pass's) and this pass's peak. nullopt when it ran out of memory.
struct PassPeak {
  int64_t above = 0, total = 0;
};
class PassMeasure {
 public:
  PassMeasure(const c10::Device& device, int64_t held, const std::function<void(int64_t)>& forward_backward)
      : device_(device), held_(held), forward_backward_(forward_backward) {}
  // The most that earlier passes left held as a pass began (a workspace, a table).
  int64_t left() const { return left_; }
  std::optional<PassPeak> operator()(int64_t size) {
    try {
      const AllocationPeak peak(device_);
      if (!first_start_) first_start_ = peak.start_bytes();
      forward_backward_(size);
      const int64_t left = std::max<int64_t>(peak.start_bytes() - *first_start_, 0);
      left_ = std::max(left_, left);
      return PassPeak{peak.bytes(), held_ + left + peak.bytes()};
    } catch (const c10::OutOfMemoryError&) {
      release_cached_memory(device_);
      return std::nullopt;
    }
  }

 private:
  c10::Device device_;
  int64_t held_;
  const std::function<void(int64_t)>& forward_backward_;
  std::optional<int64_t> first_start_;
  int64_t left_ = 0;
};

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
  std::vector<int64_t> small, large;  // divisors up to its square root, and their partners
  for (int64_t d = 1; d <= sequences / d; ++d)
    if (sequences % d == 0) {
      small.push_back(d);
      if (d != sequences / d) large.push_back(sequences / d);
    }
  std::vector<int64_t> sizes(large.begin(), large.end());  // largest first
  sizes.insert(sizes.end(), small.rbegin(), small.rend());
  return sizes;
}

MemoryBudget memory_budget(const TrainConfig& train, const c10::Device& device, int64_t ranks_on_host) {
  if (train.batch_memory_gib)
    return {static_cast<int64_t>(*train.batch_memory_gib * static_cast<double>(int64_t{1} << 30)),
            "train.batch_memory_gib"};
  const auto total = device_memory_bytes(device, device.is_cpu() ? ranks_on_host : 1);
  if (!total)
    throw std::runtime_error("train.batch_memory_gib auto: the memory of " + device.str() +
                             " cannot be read; set train.batch_memory_gib");
  const std::string whose = device.is_cuda() ? "the GPU's " : ranks_on_host > 1 ? "this rank's share of the host's "
                                                                                  : "the host's available ";
  return {static_cast<int64_t>(kAutoBudgetShare * static_cast<double>(*total)), "90% of " + whose + gib(*total)};
}

std::string MicroBatchChoice::describe() const {
  std::ostringstream out;
  out << micro_batch_size << " (measured: " << gib(held_bytes) << " held, a pass " << mib(fit.fixed_bytes) << " + "
      << mib(fit.per_sequence_bytes) << " a sequence, " << micro_batch_size << " sequences peak"
      << (peak_measured ? "" : " by the line") << " at "
      << gib(peak_bytes) << " of the budget " << gib(budget.bytes) << ", " << budget.source << ")";
  return out.str();
}

MicroBatchChoice choose_micro_batch(const c10::Device& device, int64_t sequences, const MemoryBudget& budget,
                                    const std::function<void(int64_t)>& forward_backward) {
  MicroBatchChoice choice;
  choice.budget = budget;
  choice.held_bytes = held_memory_bytes(device);
  const auto fits = [&](const std::optional<PassPeak>& peak) { return peak && peak->total <= budget.bytes; };
  PassMeasure measure(device, choice.held_bytes, forward_backward);
  // The first pass makes what a run makes once (cuBLAS's workspace, position tables): it is
  // measured again, so that the line runs through passes that no longer include it (what it
  // left counts in every pass's whole).
  auto one = measure(1);
  if (fits(one)) one = measure(1);
  if (!fits(one))
    throw std::runtime_error(
        "train.micro_batch_size auto: one sequence does not fit " + device.str() + ": the process holds " +
        gib(choice.held_bytes) + " and a pass of one sequence " + (one ? "adds " + gib(one->above) : "ran out of memory") +
        ", over the budget of " + gib(budget.bytes) + " (" + budget.source +
        "); turn model.activation_checkpointing on, shorten data.train_length, or raise train.batch_memory_gib");
  const auto two = sequences >= 2 ? measure(2) : std::nullopt;
  choice.fit = MemoryFit::through(one->above, two ? two->above : one->above);
  if (!fits(two)) {  // one rank's share is 1, or two sequences are already over
    choice.micro_batch_size = 1;
    choice.peak_bytes = one->total;
    choice.left_bytes = measure.left();
    return choice;
  }
  // Whether the line puts `size` within the budget, in a division: size x per_sequence may not fit an
  // int64. The room is what the budget leaves beside what the process held as the pass of 2 began.
  const int64_t room = budget.bytes - (two->total - two->above) - choice.fit.fixed_bytes;
  const auto line_fits = [&](int64_t size) {
    return room >= 0 && (choice.fit.per_sequence_bytes == 0 || size <= room / choice.fit.per_sequence_bytes);
  };
  for (const int64_t size : micro_batch_candidates(sequences)) {
    if (size > 2 && !line_fits(size)) continue;
    const auto peak = size == 1 ? one : size == 2 ? two : measure(size);
    if (!fits(peak)) continue;
    choice.micro_batch_size = size;
    choice.peak_bytes = peak->total;
    choice.left_bytes = measure.left();
    return choice;
  }
  throw std::logic_error("choose_micro_batch: no size fits although two sequences do");  // 2 divides, or was not tried
}

std::string CheckpointingChoice::describe() const {
  std::ostringstream out;
  out << blocks << " of " << of << " blocks (measured: " << gib(held_bytes) << " held, a pass " << mib(every_bytes)
      << " with every block recomputed, ";
  if (last_kept_bytes) out << mib(*last_kept_bytes) << " with the last block's activations kept, ";
  if (kept_block_bytes) out << "+ " << mib(*kept_block_bytes) << " each further block that keeps them, ";
  out << blocks << " recomputed peak"
      << (peak_measured ? "" : " by the line") << " at " << gib(peak_bytes) << " of the budget " << gib(budget.bytes)
      << ", " << budget.source << ")";
  return out.str();
}

CheckpointingChoice choose_checkpointed_blocks(const c10::Device& device, int64_t blocks, const MemoryBudget& budget,
                                               const std::function<void(int64_t)>& forward_backward,
                                               std::optional<int64_t> held) {
  CheckpointingChoice choice;
  choice.of = blocks;
  choice.budget = budget;
  choice.held_bytes = held ? *held : held_memory_bytes(device);
  const auto fits = [&](const std::optional<PassPeak>& peak) { return peak && peak->total <= budget.bytes; };
  PassMeasure measure(device, choice.held_bytes, forward_backward);
  auto every = measure(blocks);  // the first pass makes what a run makes once (batch_size.h): measured again
  if (fits(every)) every = measure(blocks);
  if (!fits(every))
    throw std::runtime_error(
        "model.activation_checkpointing auto: a step does not fit " + device.str() +
        " even with every block recomputed: the process holds " + gib(choice.held_bytes) + " and a pass " +
        (every ? "adds " + gib(every->above) : "ran out of memory") + ", over the budget of " + gib(budget.bytes) +
        " (" + budget.source + "); lower train.micro_batch_size, shorten data.train_length, or raise "
        "train.batch_memory_gib");
  choice.every_bytes = every->above;
  choice.every_peak_bytes = every->total;
  choice.blocks = blocks;
  choice.peak_bytes = every->total;
  // The last block keeping its activations costs about nothing: with every block recomputed, one block's
  // activations exist anyway while backward is in it. Each further block adds its own: the line runs through
  // one and two blocks kept.
  std::optional<PassPeak> last_kept, two_kept;
  if (blocks >= 1 && fits(last_kept = measure(blocks - 1))) {
    choice.last_kept_bytes = last_kept->above;
    choice.blocks = blocks - 1;
    choice.peak_bytes = last_kept->total;
  }
  if (choice.blocks != blocks - 1 || blocks < 2 || !fits(two_kept = measure(blocks - 2))) return choice;
  const int64_t per_block = std::max<int64_t>(two_kept->above - last_kept->above, 0);
  choice.kept_block_bytes = per_block;
  // The line's fewest, in a division (blocks x bytes may not fit an int64): the room is what the budget
  // leaves beside what the process held as the two-kept pass began and the last-kept pass's peak.
  const int64_t room = budget.bytes - (two_kept->total - two_kept->above) - last_kept->above;
  const int64_t further = per_block == 0 ? blocks : std::min(blocks, room / per_block);
  int64_t fits_at = blocks - 2;  // recomputing this many fits (measured)
  auto peak = two_kept;
  if (const int64_t guess = std::max<int64_t>(blocks - 1 - std::max<int64_t>(further, 1), 0); guess < fits_at) {
    if (const auto at = measure(guess); fits(at)) {
      fits_at = guess;
      peak = at;
    } else {
      for (int64_t over = guess; fits_at - over > 1;) {  // recomputing `over` does not fit: halve the interval
        const int64_t k = over + (fits_at - over) / 2;
        if (const auto mid = measure(k); fits(mid)) {
          fits_at = k;
          peak = mid;
        } else {
          over = k;
        }
      }
    }
  }
  choice.blocks = fits_at;
  choice.peak_bytes = peak->total;
  return choice;
}

}  // namespace segtrain::trainer
