#pragma once
// Run checkpoints (docs/architecture.md, "Run directory"); not to be confused
// with activation checkpointing (models/activation_checkpoint.h):
//   <run>/checkpoints/step-<N>/ and <run>/final/ each hold model.safetensors,
//   model_config.json, optimizer.safetensors, trainer_state.json, config.yaml and
//   store_tokenizer.json (which tokenizer the model learned).
// A directory is written beside its final name and renamed in (common/atomic_write.h),
// so one that exists is complete; leftovers of an interrupted write are ignored.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "models/transformer.h"
#include "trainer/config/config.h"
#include "trainer/train/optimizer.h"

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
  data::Cursor cursor;        // where the data stream continues
};

std::string state_to_json(const TrainerState& state);
TrainerState state_from_json(const std::string& text, const std::string& source);

// Writes a complete checkpoint directory at `dir` (replacing one that is there).
// `weights`: Optimizer::master_weights(), the fp32 master weights of bf16
// parameters (model.safetensors then holds them, so a checkpoint is fp32
// whatever the storage); empty: the model's own parameters.
// `optimizer_state` is Optimizer::state_dict(): the whole state, also when it
// was sharded over ranks, so any world size can resume from it; empty: none
// is written (final/ without train.final_optimizer_state).
// `store_tokenizer` is the store's tokenizer record (store_tokenizer.json,
// data/tokenizer_identity.h), empty when the store records no tokenizer.
void save_checkpoint(const fs::path& dir, const models::TransformerLM& model,
                     const std::map<std::string, at::Tensor>& weights,
                     const std::map<std::string, at::Tensor>& optimizer_state, const TrainerState& state,
                     const Config& config, const std::string& store_tokenizer);

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

// Loads weights and optimizer state saved by save_checkpoint (the weights also
// into the optimizer's master weights, when it keeps them). Returns whether the
// checkpoint had optimizer state (a final/ keeps it only with
// train.final_optimizer_state).
bool load_checkpoint(const fs::path& dir, models::TransformerLM& model, Optimizer& optimizer);

// Keeps the newest `keep_last` step-* directories (0 keeps all) and removes any
// leftovers of interrupted writes.
void prune_checkpoints(const fs::path& run_dir, int64_t keep_last);

}  // namespace segtrain::trainer
