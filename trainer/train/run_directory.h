#pragma once
// A run's directory and its resume rules: whether train may write into run.output_dir, whether
// it continues a checkpoint there (--resume and a launcher's restart decide), and the run's own
// log file. Kept apart from the Trainer so that the rules read, and change, on their own.
#include <filesystem>
#include <memory>
#include <optional>

#include "common/dir_lock.h"
#include "common/log.h"
#include "trainer/config/config.h"
#include "trainer/train/distributed.h"
#include "trainer/train/run_checkpoint.h"
#include "trainer/train/trainer.h"

namespace segtrain::trainer {

// Where the run's files are, its lock (rank 0's), which checkpoint it continues
// from, and its log file.
struct RunDirectory {
  fs::path dir;
  DirectoryLock lock;
  std::optional<CheckpointRef> resume_from;
  std::unique_ptr<log::ScopedFile> log_file;
};

// A launcher restart (segtrain-launch, torchrun) continues the interrupted run;
// otherwise an existing run is only continued with --resume (or --resume auto).
// Rank 0 locks the directory before it looks for checkpoints: one writer per run.
// InputError when run.output_dir and `requested` do not fit; opens the run's log file.
RunDirectory open_run_directory(const Config& c, const DistributedEnv& dist, Resume requested);

}  // namespace segtrain::trainer
