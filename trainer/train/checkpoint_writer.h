#pragma once
// Step checkpoints saved while training goes on, so that no rank waits for one
// rank to gather and write everything (run_checkpoint.h has the files).
//
// A save starts on every rank after the same step: rank 0 makes the shared
// directory, every rank passes a barrier, then each rank copies its part to
// host memory and writes it on a thread of its own. The optimizer must not
// change what is being copied, so the loop calls wait_for_copy() before its next
// update; forward and backward of that step overlap the copy. Each step's
// totals (step_totals.h) carry every rank's part() until all are written; rank
// 0 then renames the directory in, and prunes. One save is in flight at most:
// the next save, a stop and the end of the run first finish() the last one,
// waiting together under distributed.save_timeout_s.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainer/train/run_checkpoint.h"

namespace segtrain::trainer {

// This rank's part of the save in flight.
enum class SavePart { none, writing, written, failed };  // none: no save in flight

class CheckpointWriter {
 public:
  // `agree` sums host values over the ranks (every rank calls it the same
  // number of times); `run_dir` and `keep_last` are for pruning.
  CheckpointWriter(int64_t rank, int64_t world_size, std::function<std::vector<double>(std::vector<double>)> agree,
                   fs::path run_dir, int64_t keep_last, std::chrono::seconds save_timeout);
  // Waits for a write in flight (at most save_timeout), then leaves it to finish.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Rank 0, before the barrier that precedes start(): an empty shared
  // directory for `dir` (a leftover of an interrupted save is removed).
  void prepare(const fs::path& dir) const;
  // Starts this rank's part of saving `live` as `dir` on the writer's thread:
  // `background`, from a host copy (training may go on once wait_for_copy()
  // returns); otherwise straight from `live`, tensor by tensor with no copy of
  // the whole, and the caller finish()es before anything changes it.
  void start(const fs::path& dir, CheckpointContent live, bool background);
  // Until this rank's copy of the save in flight is made.
  void wait_for_copy();
  SavePart part();
  // With the ranks' counts from a step's totals: rank 0 commits once all have
  // written their part, and the next counts say whether that worked; every rank
  // throws (runtime_error, the checkpoint named, earlier ones intact) once one
  // has failed to write or to commit.
  void settle(int64_t written, int64_t failed);
  // Waits with the other ranks until the save in flight is committed or has
  // failed, at most distributed.save_timeout_s. Nothing in flight: returns.
  void finish();

 private:
  struct Job;
  // Ends the save in flight on every rank alike: throws runtime_error(reason).
  [[noreturn]] void fail_with(const std::string& reason, bool own_part_hung = false);

  int64_t rank_, world_size_;
  std::function<std::vector<double>(std::vector<double>)> agree_;
  fs::path run_dir_;
  int64_t keep_last_;
  std::chrono::seconds save_timeout_;
  std::shared_ptr<Job> job_;  // the save in flight (shared with its thread)
  bool committed_ = false;    // every part written and rank 0 has tried to rename it in
  std::thread thread_;
};

}  // namespace segtrain::trainer
