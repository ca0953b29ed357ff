#pragma once
// Run checkpoints (docs/architecture.md, "Run directory"); not to be confused
// with activation checkpointing (models/modules/activation_checkpoint.h):
//   <run>/checkpoints/step-<N>/ and <run>/final/ each hold the files of the run's
//   parts (checkpoint_parts.h): model.safetensors (the fp32 weights),
//   model_config.json, trainer_state.json, config.yaml, store_tokenizer.json
//   (which tokenizer the model learned), converters.json (a converted model),
//   and AdamW's state as optimizer.index.json plus one
//   optimizer-<rank>-of-<ranks>.safetensors a rank, each with that rank's own
//   pieces (optimizer_state.h): no rank gathers the state. Rank 0 writes the rest.
// All ranks write into one "<dir>.tmp-ranks" sibling that rank 0 renames in once
// every rank's part is written (checkpoint_writer.h), so a directory that exists
// is complete; leftovers of an interrupted write are ignored and pruned.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "trainer/config/config.h"
#include "trainer/train/checkpoint_part.h"
#include "trainer/train/optimizer_state.h"

namespace segtrain::trainer {

namespace fs = std::filesystem;

struct TrainerState {
  int64_t step = 0;           // optimizer steps completed
  int64_t tokens = 0;         // input tokens processed, all ranks
  int64_t loss_tokens = 0;    // tokens that contributed to the loss, all ranks
  int64_t total_steps = 0;
  int64_t world_size = 1;
  int64_t skipped_steps = 0;  // non-finite losses skipped so far
  int64_t consecutive_bad_steps = 0;  // of those, in a row up to now (the NaN guard's count)
  // Wall seconds of the training loop up to this step, summed over resumes (what
  // the saved steps cost; time lost after the last checkpoint of a stopped run is
  // not in it). The experiment grid's cost table reads it. nullopt: unknown, a run
  // begun before segtrain recorded it (a resumed part alone would pass for the whole).
  std::optional<double> train_seconds = 0.0;
  data::StreamCursor cursor;  // where the data stream continues (a cursor per source)
  // A mixture's tokens from each source so far, all ranks, by name in data.mixture's order
  // (empty for a single store: `tokens` says it).
  std::vector<std::pair<std::string, int64_t>> source_tokens;
  // What a bf16 run on the CPU computes its matmuls in, "bf16" or "fp32", so that its
  // resumption computes as it did (trainer/runtime/cpu_matmul.h); empty for other runs.
  std::string cpu_matmul;
};

std::string state_to_json(const TrainerState& state);
TrainerState state_from_json(const std::string& text, const std::string& source);

// The file naming every rank's optimizer shard (checkpoint_parts.h writes them).
inline constexpr const char* kOptimizerIndex = "optimizer.index.json";

// Copies every part's tensors to the CPU (a background save, checkpoint_writer.h).
void copy_to_host(CheckpointContent& content);

// The sibling every rank writes its part of `dir` into.
fs::path shared_temp_dir(const fs::path& dir);
// Writes this rank's parts of the checkpoint into `temp_dir` (each file
// atomically). Errors say which checkpoint `dir` was not saved and that the
// earlier ones are intact.
void write_checkpoint_part(const fs::path& temp_dir, const fs::path& dir, const CheckpointContent& content);
// Rank 0, once every rank's part is written: fsyncs and renames the shared
// directory into `dir` (replacing one that is there).
void commit_checkpoint(const fs::path& temp_dir, const fs::path& dir);

struct CheckpointRef {
  fs::path dir;
  TrainerState state;
};

// The checkpoint with the most steps among run/checkpoints/step-* and run/final.
std::optional<CheckpointRef> newest_checkpoint(const fs::path& run_dir);

// Refuses (InputError, listing every difference) a checkpoint whose config differs
// from `config` in a key with KeyRole::resume, or in one of `extra_keys` (an
// experiment also insists on the same optimizer settings), or whose global
// batch (micro_batch_size x grad_accum x ranks) differs: the world size may
// change when grad_accum or micro_batch_size keeps the global batch, and the
// data stream then continues with the same samples in each step.
void check_resume_compatible(const fs::path& checkpoint_dir, const Config& config, int64_t world_size,
                             const std::vector<std::string>& extra_keys = {});

// The optimizer state of a checkpoint, its shards kept mapped (nullopt: none,
// a final/ without train.final_optimizer_state). Reads both this layout and
// the single optimizer.safetensors of checkpoints saved before it.
std::optional<SavedOptimizerState> read_optimizer_state(const fs::path& dir);

// Keeps the newest `keep_last` step-* directories (0 keeps all) and removes any
// leftovers of interrupted writes. Never throws: what it cannot remove stays,
// with a warning (a checkpoint the ranks agreed is saved stays saved).
void prune_checkpoints(const fs::path& run_dir, int64_t keep_last);

}  // namespace segtrain::trainer
