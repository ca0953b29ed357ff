#pragma once
// The parts of a run checkpoint (checkpoint_part.h), one per component, and the
// saved files they are made of. Files (docs/architecture.md, "Run directory"):
//   ModelPart           model.safetensors, model_config.json      rank 0
//   OptimizerPart       optimizer-<r>-of-<N>.safetensors           every rank
//                       optimizer.index.json                       rank 0
//   TrainerStatePart    trainer_state.json                         rank 0
//   RandomStatePart     rng_state.json                             rank 0
//   RunRecordPart       config.yaml, store_tokenizer.json          rank 0
//   ConvertersPart      converters.json (a converted model only)   rank 0
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/modules/converters/converter.h"
#include "models/modules/transformer.h"
#include "trainer/train/checkpoint_part.h"
#include "trainer/train/optimizer.h"
#include "trainer/train/optimizer_state.h"
#include "trainer/train/run_checkpoint.h"

namespace segtrain::trainer {

// Saved files, for the parts below and for tests.
// Text files by name.
std::shared_ptr<SavedPart> saved_texts(std::map<std::string, std::string> files);
// A segtrain model directory's two files (models/modules/model_io.h save_model_dir), and text files
// beside them (base.json).
std::shared_ptr<SavedPart> saved_model(models::ModelConfig config, std::map<std::string, at::Tensor> weights,
                                       std::map<std::string, std::string> texts = {});
// This rank's AdamW shard, and on rank 0 the index naming every rank's.
std::shared_ptr<SavedPart> saved_optimizer(int64_t steps, std::vector<StatePiece> pieces, int64_t rank,
                                           int64_t world_size);

// The model's weights in fp32: its parameters, or the optimizer's master weights
// where it keeps them (they are the model's weights, and load back with them). Given
// its base's record (base_json: models/spec/base_record.h, a converted run from a base), only
// the parameters that train are saved, with base.json; the rest are the base's.
class ModelPart final : public CheckpointPart {
 public:
  ModelPart(models::TransformerLM model, Optimizer& optimizer, std::string base_json = "")
      : model_(std::move(model)), optimizer_(optimizer), base_json_(std::move(base_json)) {}
  std::shared_ptr<SavedPart> save(const SaveRequest& request) override;
  // A checkpoint of the trainable part: its base must be unchanged (InputError naming the file).
  void load(const fs::path& dir) override;

 private:
  models::TransformerLM model_;
  Optimizer& optimizer_;
  std::string base_json_;  // empty: every weight is saved
};

// AdamW's moments of the trainable parameters, each rank its own pieces.
class OptimizerPart final : public CheckpointPart {
 public:
  explicit OptimizerPart(Optimizer& optimizer) : optimizer_(optimizer) {}
  std::shared_ptr<SavedPart> save(const SaveRequest& request) override;
  // A final/ saved without train.final_optimizer_state has none: loaded_state() says so.
  void load(const fs::path& dir) override;
  bool loaded_state() const { return loaded_state_; }

 private:
  Optimizer& optimizer_;
  bool loaded_state_ = false;
};

// The trainer's counters and the data stream's cursor (TrainerState).
class TrainerStatePart final : public CheckpointPart {
 public:
  explicit TrainerStatePart(TrainerState& state) : state_(state) {}
  std::shared_ptr<SavedPart> save(const SaveRequest& request) override;
  void load(const fs::path& dir) override;

 private:
  TrainerState& state_;
};

// The random generators dropout draws from (random_state.h). A checkpoint without the file
// (written before segtrain kept it) leaves them as run.seed set them.
class RandomStatePart final : public CheckpointPart {
 public:
  explicit RandomStatePart(c10::Device device) : device_(device) {}
  std::shared_ptr<SavedPart> save(const SaveRequest& request) override;
  void load(const fs::path& dir) override;

 private:
  c10::Device device_;
};

// What the run was: its resolved config.yaml and the store's tokenizer record
// (empty: the store records none). Nothing to load: check_resume_compatible read
// the config before the model was built.
class RunRecordPart final : public CheckpointPart {
 public:
  RunRecordPart(std::string config_yaml, std::string store_tokenizer)
      : config_yaml_(std::move(config_yaml)), store_tokenizer_(std::move(store_tokenizer)) {}
  std::shared_ptr<SavedPart> save(const SaveRequest& request) override;
  void load(const fs::path& /*dir*/) override {}

 private:
  std::string config_yaml_, store_tokenizer_;
};

// The model converters the run applied (models/modules/converters/converter.h): what
// loading the model directory folds, and what a resume must apply alike.
class ConvertersPart final : public CheckpointPart {
 public:
  explicit ConvertersPart(const models::Converters& converters) : converters_(converters) {}
  std::shared_ptr<SavedPart> save(const SaveRequest& request) override;
  // Refuses a checkpoint converted otherwise than this run converts its model.
  void load(const fs::path& dir) override;

 private:
  const models::Converters& converters_;
};

}  // namespace segtrain::trainer
