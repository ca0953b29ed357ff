#pragma once
// A run checkpoint is assembled from parts (run_checkpoint.h has the directory):
// each component of a run (the model's weights, the optimizer, the trainer's
// counters and data cursor, the run's record, the model converters) saves its
// own files and loads its own state back, so a new component adds a part
// instead of fields to one struct the trainer fills (checkpoint_parts.h has them).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

namespace segtrain::trainer {

// One component's files of one checkpoint as this rank saves them: views of the
// live state until copy_to_host(), which a background save calls before training
// goes on (checkpoint_writer.h); write() then runs on the writer's thread.
class SavedPart {
 public:
  virtual ~SavedPart() = default;
  // Copies the tensors it holds to host memory (one tensor at a time).
  virtual void copy_to_host() {}
  // Writes its files into `temp_dir`, each atomically.
  virtual void write(const std::filesystem::path& temp_dir) const = 0;
};

// What one rank saves of one checkpoint.
using CheckpointContent = std::vector<std::shared_ptr<SavedPart>>;

struct SaveRequest {
  int64_t rank = 0, world_size = 1;
  bool with_optimizer_state = true;  // false: a final/ without train.final_optimizer_state
};

class CheckpointPart {
 public:
  virtual ~CheckpointPart() = default;
  // This rank's share of the checkpoint about to be written; nullptr when it has
  // none. Every rank calls every part's save() in the same order: a part may
  // gather over the ranks.
  virtual std::shared_ptr<SavedPart> save(const SaveRequest& request) = 0;
  // Takes its state back from checkpoint `dir` (a resume); InputError naming
  // the file when it is not what this run can continue from.
  virtual void load(const std::filesystem::path& dir) = 0;
};

}  // namespace segtrain::trainer
