// train.micro_batch_size auto (trainer/train/batch_size.h) against passes whose memory the
// test decides: CPU tensors of known sizes held at once, so the measured peak, the line
// through 1 and 2 sequences and the size chosen have exact expectations.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "trainer/runtime/allocation_peak.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/batch_size.h"
#include "trainer/train/rank_failure.h"

namespace segtrain::trainer {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
const c10::Device kCpu(c10::kCPU);

// A pass that holds `bytes` at once, in float tensors, and frees them.
void hold(int64_t bytes) {
  std::vector<at::Tensor> held;
  for (int64_t left = bytes; left > 0; left -= kMiB) held.push_back(at::empty({std::min(left, kMiB) / 4}, at::kFloat));
}

TEST(AllocationPeak, CountsWhatTheWorkHeldAtOnceOnTheCpuAndPutsPyTorchsAllocatorBack) {
  c10::Allocator* before = c10::GetCPUAllocator();
  const at::Tensor earlier = at::empty({kMiB}, at::kFloat);  // 4 MiB before the watch: not counted
  int64_t peak = 0;
  at::Tensor kept;
  {
    AllocationPeak watch(kCpu);
    EXPECT_NE(c10::GetCPUAllocator(), before);
    hold(3 * kMiB);  // 3 MiB at once, freed
    { const at::Tensor a = at::empty({kMiB / 4}, at::kFloat), b = at::empty({kMiB / 4}, at::kFloat); }  // 2 MiB
    kept = at::empty({kMiB / 2}, at::kFloat);  // 2 MiB that outlives the watch
    hold(2 * kMiB);                            // 2 + 2 MiB at once
    peak = watch.bytes();
    EXPECT_THROW(AllocationPeak{kCpu}, std::logic_error) << "one CPU watch at a time";
  }
  EXPECT_EQ(peak, 4 * kMiB);
  EXPECT_EQ(c10::GetCPUAllocator(), before);
  kept = at::Tensor();  // freed through the counter after the watch: no crash, no effect
  AllocationPeak again(kCpu);
  EXPECT_EQ(again.bytes(), 0);
}

TEST(BatchSize, GlobalBatchSizeGivesEachRankItsShareAndTheAccumulation) {
  TrainConfig t;
  t.grad_accum = 3;
  BatchShape shape = batch_shape(t, 2, 4);
  EXPECT_EQ(shape.grad_accum, 3) << "no global batch: grad_accum as configured";
  EXPECT_EQ(shape.global(2), 24);
  t.grad_accum = 1;
  t.global_batch_size = 24;
  shape = batch_shape(t, 2, 4);
  EXPECT_EQ(shape.micro_batch_size, 4);
  EXPECT_EQ(shape.grad_accum, 3);
  EXPECT_EQ(batch_shape(t, 3, 8).grad_accum, 1);
  EXPECT_EQ(sequences_per_rank(t, 4), 6);
  try {
    batch_shape(t, 5, 1);
    ADD_FAILURE() << "24 over 5 ranks";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "train.global_batch_size: 24 sequences do not divide over 5 ranks; make it a multiple of 5");
  }
  try {
    batch_shape(t, 2, 5);
    ADD_FAILURE() << "12 a rank in passes of 5";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("leave 12 a rank, not a multiple of train.micro_batch_size 5"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(micro_batch_candidates(12), (std::vector<int64_t>{12, 6, 4, 3, 2, 1}));
  EXPECT_EQ(micro_batch_candidates(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(micro_batch_candidates(36), (std::vector<int64_t>{36, 18, 12, 9, 6, 4, 3, 2, 1}));
  EXPECT_EQ(micro_batch_candidates(7), (std::vector<int64_t>{7, 1}));
  EXPECT_EQ(micro_batch_candidates(int64_t{1} << 20).size(), 21u) << "2^20's divisors, found up to its square root";
  const MemoryFit fit = MemoryFit::through(7 * kMiB, 10 * kMiB);
  EXPECT_EQ(fit.fixed_bytes, 4 * kMiB);
  EXPECT_EQ(fit.per_sequence_bytes, 3 * kMiB);
  EXPECT_EQ(fit.at(5), 19 * kMiB);
}

// The budget is set around what the process holds when the choice starts (its resident set
// on the CPU), with a margin of a MiB either way for what the test itself moves.
struct Pass {
  std::function<int64_t(int64_t)> bytes;  // what a pass of `size` sequences holds at once
  std::vector<int64_t> sizes;             // the sizes measured, in order
  void operator()(int64_t size) {
    sizes.push_back(size);
    hold(bytes(size));
  }
};

MemoryBudget room_for(int64_t bytes) { return {held_memory_bytes(kCpu) + bytes, "the test's"}; }

TEST(BatchSize, AutoTakesTheLargestDivisorThatTheLineAndItsOwnPassFit) {
  // 2 MiB whatever the size, 3 MiB a sequence; room for 4 sequences and a half of 12.
  Pass linear{[](int64_t n) { return 2 * kMiB + 3 * kMiB * n; }, {}};
  auto choice = choose_micro_batch(kCpu, 12, room_for(2 * kMiB + 3 * kMiB * 9 / 2), std::ref(linear));
  EXPECT_EQ(choice.micro_batch_size, 4);
  EXPECT_EQ(linear.sizes, (std::vector<int64_t>{1, 1, 2, 4}))
      << "1 twice (the first pass warms what a run makes once), 6 and 12 past the line, 4 measured itself";
  EXPECT_EQ(choice.fit.per_sequence_bytes, 3 * kMiB);
  EXPECT_EQ(choice.fit.fixed_bytes, 2 * kMiB);
  EXPECT_EQ(choice.peak_bytes, choice.held_bytes + 14 * kMiB) << "what was held, and the pass's 2 + 4 x 3 MiB";
  EXPECT_NE(choice.describe().find("4 (measured: "), std::string::npos) << choice.describe();
  EXPECT_NE(choice.describe().find("the test's)"), std::string::npos) << choice.describe();
  // Room for everything: the whole share in one pass.
  Pass all{linear.bytes, {}};
  EXPECT_EQ(choose_micro_batch(kCpu, 12, room_for(200 * kMiB), std::ref(all)).micro_batch_size, 12);
  EXPECT_EQ(all.sizes, (std::vector<int64_t>{1, 1, 2, 12}));
}

// A pass that grows faster than the line through 1 and 2 (attention's T^2 grows per sequence, but
// an allocator's rounding does not): the line's choice is measured, found over, and the next
// divisor taken.
TEST(BatchSize, AutoStepsDownWhenTheChosenSizesOwnPassDoesNotFit) {
  Pass quadratic{[](int64_t n) { return kMiB * n * n; }, {}};  // 1, 4, 9 (3), 16 (4), 36 (6) MiB
  auto choice = choose_micro_batch(kCpu, 12, room_for(13 * kMiB), std::ref(quadratic));
  // The line through 1 and 4 MiB is 3 MiB a sequence, -2 MiB fixed (counted 0): 6 x 3 = 18 > 13,
  // 4 x 3 = 12 fits by the line but measures 16; 3 measures 9.
  EXPECT_EQ(choice.micro_batch_size, 3);
  EXPECT_EQ(quadratic.sizes, (std::vector<int64_t>{1, 1, 2, 4, 3}));
  EXPECT_EQ(choice.peak_bytes, choice.held_bytes + 9 * kMiB);
}

// What a pass leaves behind (cuBLAS's workspace, a cache: here 6 MiB the first pass keeps) is
// held by every later pass: the whole peak counts it, not only each pass's growth.
TEST(BatchSize, WhatTheFirstPassLeavesCountsInEveryLaterPass) {
  std::vector<at::Tensor> workspace;
  Pass leaving{[&](int64_t n) {
                 if (workspace.empty()) workspace.push_back(at::empty({6 * kMiB / 4}, at::kFloat));
                 return kMiB * n;
               },
               {}};
  auto choice = choose_micro_batch(kCpu, 8, room_for(11 * kMiB), std::ref(leaving));
  // 1 MiB a sequence: 8 needs 6 + 8 = 14 MiB (past the line, which counts the 6), 4 needs 10.
  EXPECT_EQ(choice.micro_batch_size, 4);
  EXPECT_EQ(leaving.sizes, (std::vector<int64_t>{1, 1, 2, 4}));
  EXPECT_EQ(choice.fit.per_sequence_bytes, kMiB) << "the line runs through the passes after the first";
  EXPECT_EQ(choice.peak_bytes, choice.held_bytes + 10 * kMiB);
  // The blocks' auto as well: with every block recomputed, what another rank's choice of every block
  // would peak at counts the 6 MiB (a rank agreement's plan line once left them out).
  workspace.clear();
  Pass blocks{[&](int64_t k) {
                if (workspace.empty()) workspace.push_back(at::empty({6 * kMiB / 4}, at::kFloat));
                return 4 * kMiB + kMiB * (12 - k);
              },
              {}};
  auto recomputed = choose_checkpointed_blocks(kCpu, 12, room_for(100 * kMiB), std::ref(blocks));
  EXPECT_EQ(recomputed.every_bytes, 4 * kMiB);
  EXPECT_EQ(recomputed.every_peak_bytes, recomputed.held_bytes + 10 * kMiB);
}

TEST(BatchSize, APassThatRunsOutOfMemoryCountsAsOverAndOneSequenceOverIsRefused) {
  Pass out_of_memory{[](int64_t n) {
                       TORCH_CHECK_WITH(OutOfMemoryError, n < 4, "out of memory (the test's)");
                       return kMiB * n;
                     },
                     {}};
  auto choice = choose_micro_batch(kCpu, 8, room_for(100 * kMiB), std::ref(out_of_memory));
  EXPECT_EQ(choice.micro_batch_size, 2);
  EXPECT_EQ(out_of_memory.sizes, (std::vector<int64_t>{1, 1, 2, 8, 4}));

  Pass two_over{[](int64_t n) { return 5 * kMiB * n; }, {}};
  EXPECT_EQ(choose_micro_batch(kCpu, 8, room_for(7 * kMiB), std::ref(two_over)).micro_batch_size, 1);
  EXPECT_EQ(two_over.sizes, (std::vector<int64_t>{1, 1, 2})) << "two over: nothing larger is tried";

  Pass too_big{[](int64_t n) { return 20 * kMiB * n; }, {}};
  try {
    choose_micro_batch(kCpu, 8, room_for(10 * kMiB), std::ref(too_big));
    ADD_FAILURE() << "one sequence of 20 MiB in 10";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.micro_batch_size auto: one sequence does not fit cpu: the process holds "), std::string::npos)
        << what;
    EXPECT_NE(what.find("a pass of one sequence adds 0.02 GiB, over the budget of "), std::string::npos) << what;
    EXPECT_NE(what.find("raise train.batch_memory_gib"), std::string::npos) << what;
  }
  EXPECT_EQ(too_big.sizes, (std::vector<int64_t>{1})) << "the first pass is over: not measured again";
}

// model.activation_checkpointing auto over passes of 12 blocks whose memory the test decides: `bytes(k)`
// with the first k blocks recomputed.
TEST(CheckpointedBlocks, AutoTakesTheFewestTheLineAllowsAndItsOwnPassFits) {
  // 4 MiB with every block recomputed, 3 MiB more a block that keeps its activations; room for 5 of them.
  Pass linear{[](int64_t k) { return 4 * kMiB + 3 * kMiB * (12 - k); }, {}};
  auto choice = choose_checkpointed_blocks(kCpu, 12, room_for(4 * kMiB + 3 * kMiB * 5 + kMiB), std::ref(linear));
  EXPECT_EQ(choice.blocks, 7);
  EXPECT_EQ(choice.of, 12);
  EXPECT_EQ(linear.sizes, (std::vector<int64_t>{12, 12, 11, 10, 7}))
      << "every block twice (the first pass warms what a run makes once), the last one's and the last two's "
         "activations kept, the line's 7 measured itself";
  EXPECT_EQ(choice.every_bytes, 4 * kMiB);
  EXPECT_EQ(choice.every_peak_bytes, choice.held_bytes + 4 * kMiB) << "what another rank's every block would peak at";
  EXPECT_EQ(choice.last_kept_bytes, 7 * kMiB);
  EXPECT_EQ(choice.kept_block_bytes, 3 * kMiB);
  EXPECT_EQ(choice.peak_bytes, choice.held_bytes + 19 * kMiB) << "what was held, and the pass's 4 + 5 x 3 MiB";
  EXPECT_NE(choice.describe().find("7 of 12 blocks (measured: "), std::string::npos) << choice.describe();
  EXPECT_NE(choice.describe().find("4.0 MiB with every block recomputed, 7.0 MiB with the last block's activations "
                                   "kept, + 3.0 MiB each further block that keeps them"),
            std::string::npos)
      << choice.describe();
  // Room for every block's activations: none recomputed.
  Pass roomy{linear.bytes, {}};
  EXPECT_EQ(choose_checkpointed_blocks(kCpu, 12, room_for(100 * kMiB), std::ref(roomy)).blocks, 0);
  EXPECT_EQ(roomy.sizes, (std::vector<int64_t>{12, 12, 11, 10, 0}));
  // Room for the last block's activations, not for two: every block but the last recomputed.
  Pass tight{linear.bytes, {}};
  EXPECT_EQ(choose_checkpointed_blocks(kCpu, 12, room_for(8 * kMiB), std::ref(tight)).blocks, 11);
  EXPECT_EQ(tight.sizes, (std::vector<int64_t>{12, 12, 11, 10}));
  // Not even the last block's: every block.
  Pass tighter{linear.bytes, {}};
  auto all = choose_checkpointed_blocks(kCpu, 12, room_for(5 * kMiB), std::ref(tighter));
  EXPECT_EQ(all.blocks, 12);
  EXPECT_EQ(all.peak_bytes, all.held_bytes + 4 * kMiB);
  EXPECT_EQ(tighter.sizes, (std::vector<int64_t>{12, 12, 11}));
  EXPECT_FALSE(all.last_kept_bytes.has_value()) << "a pass over the budget gives no figure";
  EXPECT_EQ(all.describe().find("kept"), std::string::npos) << all.describe();
  // What the process held before a micro_batch_size auto measured first is the baseline when given.
  Pass given{linear.bytes, {}};
  EXPECT_EQ(choose_checkpointed_blocks(kCpu, 12, room_for(20 * kMiB), std::ref(given), held_memory_bytes(kCpu) - 30 * kMiB)
                .blocks,
            0)
      << "30 MiB less held: room for every block";
}

// A pass that grows faster than the line (a block's activations that are not all alike): the line's
// choice is measured, found over, and the fewest that fits found by halving the interval to the
// last pass that fit; a pass out of memory counts as over; every block over is refused.
TEST(CheckpointedBlocks, AutoHalvesTowardsTheFewestThatFitsAndRefusesWhenEveryBlockIsOver) {
  // Kept blocks cost 1, 2, 3, ... MiB (the n-th kept block n MiB): 4 MiB + kept (kept + 1) / 2 MiB.
  Pass growing{[](int64_t k) { return 4 * kMiB + kMiB * (12 - k) * (13 - k) / 2; }, {}};
  auto choice = choose_checkpointed_blocks(kCpu, 12, room_for(4 * kMiB + 10 * kMiB + kMiB / 2), std::ref(growing));
  // 1 and 2 kept measure 5 and 7 MiB: the line (2 MiB a further block) allows 4 more, so 7 recomputed, which
  // measures 4 + 15 MiB, over; then 7..10 halved: 8 (4 + 10, fits).
  EXPECT_EQ(choice.blocks, 8);
  EXPECT_EQ(growing.sizes, (std::vector<int64_t>{12, 12, 11, 10, 7, 8}));
  EXPECT_EQ(choice.peak_bytes, choice.held_bytes + 14 * kMiB);

  Pass out_of_memory{[](int64_t k) {
                       TORCH_CHECK_WITH(OutOfMemoryError, k >= 6, "out of memory (the test's)");
                       return kMiB * (12 - k);
                     },
                     {}};
  EXPECT_EQ(choose_checkpointed_blocks(kCpu, 12, room_for(100 * kMiB), std::ref(out_of_memory)).blocks, 6);
  EXPECT_EQ(out_of_memory.sizes, (std::vector<int64_t>{12, 12, 11, 10, 0, 5, 7, 6}));

  // Models of one and two blocks, and the last two's activations out of memory.
  Pass one_block{[](int64_t k) { return kMiB * (2 - k); }, {}};
  EXPECT_EQ(choose_checkpointed_blocks(kCpu, 1, room_for(100 * kMiB), std::ref(one_block)).blocks, 0);
  EXPECT_EQ(one_block.sizes, (std::vector<int64_t>{1, 1, 0}));
  Pass two_blocks{[](int64_t k) { return kMiB * (3 - k); }, {}};
  EXPECT_EQ(choose_checkpointed_blocks(kCpu, 2, room_for(100 * kMiB), std::ref(two_blocks)).blocks, 0);
  EXPECT_EQ(two_blocks.sizes, (std::vector<int64_t>{2, 2, 1, 0})) << "two kept is every block kept: no more passes";
  Pass two_kept_out{[](int64_t k) {
                      TORCH_CHECK_WITH(OutOfMemoryError, k >= 11, "out of memory (the test's)");
                      return kMiB * (12 - k);
                    },
                    {}};
  auto last_kept = choose_checkpointed_blocks(kCpu, 12, room_for(100 * kMiB), std::ref(two_kept_out));
  EXPECT_EQ(last_kept.blocks, 11);
  EXPECT_EQ(two_kept_out.sizes, (std::vector<int64_t>{12, 12, 11, 10}));
  EXPECT_FALSE(last_kept.kept_block_bytes.has_value());

  Pass too_big{[](int64_t) { return 20 * kMiB; }, {}};
  try {
    choose_checkpointed_blocks(kCpu, 12, room_for(10 * kMiB), std::ref(too_big));
    ADD_FAILURE() << "a pass of 20 MiB in 10";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.activation_checkpointing auto: a step does not fit cpu even with every block "
                        "recomputed: the process holds "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("a pass adds 0.02 GiB, over the budget of "), std::string::npos) << what;
    EXPECT_NE(what.find("lower train.micro_batch_size"), std::string::npos) << what;
  }
  EXPECT_EQ(too_big.sizes, (std::vector<int64_t>{12})) << "the first pass is over: not measured again";
}

// A rank's failure while the ranks measure is kept until they agree (trainer/train/rank_failure.h), on one line
// whatever threw it, and every rank then throws: the failed one its own, the others naming it, all as bad input
// where any rank's was (exit 2), else as a runtime failure (exit 1).
TEST(RankFailure, IsKeptUntilTheRanksAgreeThenEveryRankThrowsAsTheFailedOneDid) {
  EXPECT_THROW(kept_failure(false, [] { TORCH_CHECK(false, "alone"); }), c10::Error) << "one rank: as it was";
  const auto c10 = kept_failure(true, [] { TORCH_CHECK(false, "a CUDA error (the test's)"); });
  EXPECT_TRUE(c10.failed);
  EXPECT_FALSE(c10.input);
  EXPECT_EQ(c10.code(), RankFailure::kFailed);
  EXPECT_NE(c10.message.find("a CUDA error (the test's)"), std::string::npos) << c10.message;
  EXPECT_EQ(c10.message.find("Exception raised from"), std::string::npos) << "no C++ backtrace: " << c10.message;
  const auto input = kept_failure(true, [] { throw InputError("data.store: bad (the test's)"); });
  EXPECT_TRUE(input.input);
  EXPECT_EQ(input.code(), RankFailure::kBadInput);
  EXPECT_FALSE(kept_failure(true, [] {}).failed);

  auto thrown = [](const RankFailure& own, int64_t rank, const std::vector<double>& all) -> std::string {
    try {
      throw_if_a_rank_failed(own, rank, all, "train.micro_batch_size auto");
    } catch (const InputError& e) {
      return std::string("input: ") + e.what();
    } catch (const std::runtime_error& e) {
      return std::string("runtime: ") + e.what();
    }
    return "(none)";
  };
  EXPECT_EQ(thrown({}, 0, {4, 2}), "(none)");
  EXPECT_EQ(thrown(input, 1, {4, -2}), "input: rank 1: data.store: bad (the test's)");
  EXPECT_EQ(thrown(c10, 1, {4, -1}).rfind("runtime: rank 1: a CUDA error (the test's)", 0), 0u);
  EXPECT_EQ(thrown({}, 0, {4, -1, 2}), "runtime: train.micro_batch_size auto: rank 1 stopped (its log says why)");
  EXPECT_EQ(thrown({}, 0, {4, -1, -2}), "input: train.micro_batch_size auto: rank 2 stopped (its log says why)")
      << "bad input on any rank is the run's";
}

TEST(BatchSize, TheBudgetIsTheConfigsOrNineTenthsOfTheDevice) {
  TrainConfig t;
  t.batch_memory_gib = 1.5;
  const MemoryBudget given = memory_budget(t, kCpu);
  EXPECT_EQ(given.bytes, 3 * (int64_t{1} << 29));
  EXPECT_EQ(given.source, "train.batch_memory_gib");
  t.batch_memory_gib.reset();
  const MemoryBudget device = memory_budget(t, kCpu);
  const auto total = device_memory_bytes(kCpu);
  ASSERT_TRUE(total.has_value());
  EXPECT_NEAR(static_cast<double>(device.bytes), 0.9 * static_cast<double>(*total), 0.02 * static_cast<double>(*total));
  EXPECT_NE(device.source.find("90% of the host's available "), std::string::npos) << device.source;
  // Two ranks on the host share what it has available.
  const MemoryBudget shared = memory_budget(t, kCpu, 2);
  const double held = static_cast<double>(held_memory_bytes(kCpu)), whole = static_cast<double>(*total);
  EXPECT_NEAR(static_cast<double>(shared.bytes), 0.9 * ((whole - held) / 2 + held), 0.02 * whole);
  EXPECT_NE(shared.source.find("90% of this rank's share of the host's "), std::string::npos) << shared.source;
}

}  // namespace
}  // namespace segtrain::trainer
