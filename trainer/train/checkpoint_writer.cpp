#include "trainer/train/checkpoint_writer.h"

#include <stdexcept>

#include "common/log.h"

namespace segtrain::trainer {

struct CheckpointWriter::Job {
  fs::path dir, temp;
  std::mutex mutex;
  std::condition_variable changed;
  bool copied = false;
  SavePart part = SavePart::writing;
  std::string error;  // why this rank's part failed
};

CheckpointWriter::CheckpointWriter(int64_t rank, int64_t world_size,
                                   std::function<std::vector<double>(std::vector<double>)> agree, fs::path run_dir,
                                   int64_t keep_last, std::chrono::seconds save_timeout)
    : rank_(rank),
      world_size_(world_size),
      agree_(std::move(agree)),
      run_dir_(std::move(run_dir)),
      keep_last_(keep_last),
      save_timeout_(save_timeout) {}

CheckpointWriter::~CheckpointWriter() {
  if (!thread_.joinable()) return;
  bool done = false;
  {
    std::unique_lock lock(job_->mutex);
    done = job_->changed.wait_for(lock, save_timeout_, [&] { return job_->part != SavePart::writing; });
  }
  // A write that hangs on its storage must not hang the exit: the thread owns
  // what it writes, and the process ends it.
  if (done) thread_.join();
  else thread_.detach();
}

void CheckpointWriter::prepare(const fs::path& dir) const {
  const fs::path temp = shared_temp_dir(dir);
  fs::remove_all(temp);
  fs::create_directories(temp);
}

void CheckpointWriter::start(const fs::path& dir, CheckpointContent live, bool background) {
  if (thread_.joinable()) thread_.join();  // finished: settle() or finish() came first
  job_ = std::make_shared<Job>();
  job_->dir = dir;
  job_->temp = shared_temp_dir(dir);
  job_->copied = !background;
  thread_ = std::thread([job = job_, live = std::move(live), background]() mutable {
    SavePart part = SavePart::written;
    std::string error;
    try {
      if (background) {
        copy_to_host(live);  // each part drops its views of the live state
        {
          const std::lock_guard lock(job->mutex);
          job->copied = true;
        }
        job->changed.notify_all();
      }
      write_checkpoint_part(job->temp, job->dir, live);
    } catch (const std::exception& e) {
      part = SavePart::failed;
      error = e.what();
    }
    {
      const std::lock_guard lock(job->mutex);
      job->copied = true;
      job->part = part;
      job->error = error;
    }
    job->changed.notify_all();
  });
}

void CheckpointWriter::wait_for_copy() {
  if (!job_) return;
  std::unique_lock lock(job_->mutex);
  job_->changed.wait(lock, [&] { return job_->copied; });
}

SavePart CheckpointWriter::part() {
  if (!job_) return SavePart::none;
  const std::lock_guard lock(job_->mutex);
  return job_->part;
}

void CheckpointWriter::fail_with(const std::string& reason, bool own_part_hung) {
  const std::shared_ptr<Job> job = std::move(job_);
  committed_ = false;
  if (thread_.joinable()) {
    // Another rank failed or was late: this rank's thread finishes its write (the
    // process must not exit while it is inside LibTorch or the file system);
    // one that is itself hung on its storage is left to the exit.
    bool done = false;
    if (!own_part_hung) {
      std::unique_lock lock(job->mutex);
      done = job->changed.wait_for(lock, save_timeout_, [&] { return job->part != SavePart::writing; });
    }
    if (done) thread_.join();
    else thread_.detach();
  }
  if (rank_ == 0) {
    std::error_code ec;
    fs::remove_all(job->temp, ec);  // the other ranks' parts with it
  }
  throw std::runtime_error(reason);
}

// Two rounds once every part is written: in the first, rank 0 renames the
// checkpoint in (and prunes); in the second, every rank hears whether that
// worked (rank 0 reports its part failed if not), so all go on or all fail.
void CheckpointWriter::settle(int64_t written, int64_t failed) {
  if (!job_) return;
  if (failed > 0) {
    std::string own;
    {
      const std::lock_guard lock(job_->mutex);
      own = job_->error;
    }
    fail_with(!own.empty() ? own
                           : "checkpoint '" + job_->dir.string() + "' not saved (earlier checkpoints are intact): " +
                                 std::to_string(failed) + " rank(s) could not write or commit their part; their logs say why");
  }
  if (written < world_size_) return;
  if (committed_) {
    committed_ = false;
    job_.reset();
    return;
  }
  thread_.join();
  committed_ = true;
  if (rank_ != 0) return;
  try {
    commit_checkpoint(job_->temp, job_->dir);
  } catch (const std::exception& e) {
    const std::lock_guard lock(job_->mutex);
    job_->part = SavePart::failed;
    job_->error = e.what();
    return;
  }
  prune_checkpoints(run_dir_, keep_last_);
}

void CheckpointWriter::finish() {
  const auto started = std::chrono::steady_clock::now();
  while (job_) {
    // Each round waits at most a second here, so the agreement below (a
    // collective under distributed.timeout_s) never waits long for a rank.
    SavePart part = SavePart::writing;
    {
      std::unique_lock lock(job_->mutex);
      job_->changed.wait_for(lock, std::chrono::seconds(1), [&] { return job_->part != SavePart::writing; });
      part = job_->part;
    }
    const bool late = part == SavePart::writing && std::chrono::steady_clock::now() - started > save_timeout_;
    const auto counts = agree_({part == SavePart::written ? 1.0 : 0.0, part == SavePart::failed ? 1.0 : 0.0,
                                late ? 1.0 : 0.0});
    settle(static_cast<int64_t>(counts[0]), static_cast<int64_t>(counts[1]));
    if (job_ && counts[2] > 0)
      fail_with("checkpoint '" + job_->dir.string() + "' not saved (earlier checkpoints are intact): " +
                std::to_string(static_cast<int64_t>(counts[2])) + " rank(s) had not written their part after " +
                "distributed.save_timeout_s (" + std::to_string(save_timeout_.count()) +
                " s); the storage is slower than that allows",
                late);
  }
}

}  // namespace segtrain::trainer
