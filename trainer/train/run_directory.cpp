// The resume rules of a run directory (run_directory.h).
#include "trainer/train/run_directory.h"

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/output_path.h"
#include "trainer/eval/stored_model.h"

namespace segtrain::trainer {

RunDirectory open_run_directory(const Config& c, const DistributedEnv& dist, Resume requested) {
  RunDirectory run{c.run.output_dir, {}, std::nullopt, nullptr};
  if (dist.rank == 0) {
    // A run directory is recognised by its lock file, which train writes first. A new
    // one may already hold checkpoints/ (a checkpoint copied in to continue with
    // --resume) and logs/ (the other ranks' logs under run.log_all_ranks, made while
    // rank 0 gets here): train's own folders, which it adds to and never replaces.
    // Nothing a run reads is written into: the store, the model it starts from (and that model's base,
    // a PEFT adapter's folder).
    std::vector<CommandInput> reads = {{c.data.store, "data.store"}};
    for (auto& input : model_init_inputs(c.model.init, "model.init")) reads.push_back(std::move(input));
    check_output_is_no_input(run.dir, "run.output_dir", reads);
    const bool is_run = fs::exists(run.dir / DirectoryLock::kFileName);
    check_output_folder(run.dir, "run.output_dir", "a run", [is_run](const fs::path& entry) {
      const auto name = entry.filename();
      return is_run || (fs::is_directory(entry) && (name == "checkpoints" || name == "logs"));
    });
    run.lock = DirectoryLock::hold(run.dir, "run.output_dir", "segtrain train");
    if (!run.lock.warning().empty()) log::warn(run.lock.warning());
  }
  run.resume_from = newest_checkpoint(run.dir);
  const bool resume = requested == Resume::required ||
                      ((requested == Resume::if_any || dist.restart > 0) && run.resume_from.has_value());
  if (!resume && run.resume_from)
    throw InputError("run.output_dir: '" + run.dir.string() + "' already holds a run (" +
                     run.resume_from->dir.string() +
                     "); use --resume (or --resume auto) to continue it or choose another output_dir");
  if (resume && !run.resume_from)
    throw InputError("--resume: '" + run.dir.string() +
                     "' has no complete checkpoint to continue from (--resume auto starts fresh then)");
  if (resume) check_resume_compatible(run.resume_from->dir, c, dist.world_size);
  fs::create_directories(run.dir);
  if (c.run.log_all_ranks) {
    fs::create_directories(run.dir / "logs");
    run.log_file = std::make_unique<log::ScopedFile>((run.dir / "logs" / ("rank-" + std::to_string(dist.rank) + ".log")).string());
  } else if (dist.rank == 0) {
    run.log_file = std::make_unique<log::ScopedFile>((run.dir / "train.log").string());
  }
  return run;
}

}  // namespace segtrain::trainer
