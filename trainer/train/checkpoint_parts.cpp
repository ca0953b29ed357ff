#include "trainer/train/checkpoint_parts.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "models/modules/converters/converter.h"
#include "models/modules/model_io.h"
#include "models/modules/safetensors.h"
#include "models/spec/base_record.h"
#include "trainer/train/random_state.h"

namespace segtrain::trainer {
namespace {

using nlohmann::json;

at::Tensor host_copy(const at::Tensor& t) { return t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true); }

class SavedTexts final : public SavedPart {
 public:
  explicit SavedTexts(std::map<std::string, std::string> files) : files_(std::move(files)) {}
  void write(const fs::path& temp_dir) const override {
    for (const auto& [name, text] : files_) write_file_atomic(temp_dir / name, text);
  }

 private:
  std::map<std::string, std::string> files_;
};

class SavedModel final : public SavedPart {
 public:
  SavedModel(models::ModelConfig config, std::map<std::string, at::Tensor> weights,
             std::map<std::string, std::string> texts)
      : config_(std::move(config)), weights_(std::move(weights)), texts_(std::move(texts)) {}
  void copy_to_host() override {
    for (auto& [name, t] : weights_) t = host_copy(t);
  }
  // A segtrain model directory's files (models/modules/model_io.h), written into the directory the
  // ranks share, never creating it: one removed after a failed save stays removed.
  void write(const fs::path& temp_dir) const override {
    models::write_safetensors((temp_dir / "model.safetensors").string(), weights_, {{"format", "pt"}});
    write_file_atomic(temp_dir / models::kModelConfigFile, models::model_config_to_json(config_));
    for (const auto& [name, text] : texts_) write_file_atomic(temp_dir / name, text);
  }

 private:
  models::ModelConfig config_;
  std::map<std::string, at::Tensor> weights_;
  std::map<std::string, std::string> texts_;
};

std::string optimizer_shard_name(int64_t rank, int64_t world_size) {
  char name[96];  // room for two 19-digit counts
  std::snprintf(name, sizeof(name), "optimizer-%05lld-of-%05lld.safetensors", static_cast<long long>(rank),
                static_cast<long long>(world_size));
  return name;
}

class SavedOptimizer final : public SavedPart {
 public:
  SavedOptimizer(int64_t steps, std::vector<StatePiece> pieces, int64_t rank, int64_t world_size)
      : steps_(steps), pieces_(std::move(pieces)), rank_(rank), world_size_(world_size) {}
  void copy_to_host() override {
    for (auto& piece : pieces_) {
      piece.exp_avg = host_copy(piece.exp_avg);
      piece.exp_avg_sq = host_copy(piece.exp_avg_sq);
    }
  }
  void write(const fs::path& temp_dir) const override {
    std::map<std::string, at::Tensor> tensors;
    for (const auto& piece : pieces_) {
      tensors[piece_key("exp_avg", piece.param, piece.offset)] = piece.exp_avg;
      tensors[piece_key("exp_avg_sq", piece.param, piece.offset)] = piece.exp_avg_sq;
    }
    models::write_safetensors((temp_dir / optimizer_shard_name(rank_, world_size_)).string(), tensors,
                              {{"rank", std::to_string(rank_)}, {"world_size", std::to_string(world_size_)}});
    if (rank_ != 0) return;
    json files = json::array();
    for (int64_t r = 0; r < world_size_; ++r) files.push_back(optimizer_shard_name(r, world_size_));
    const json index = {{"format", "segtrain AdamW state, one file a rank (trainer/train/optimizer_state.h)"},
                        {"world_size", world_size_},
                        {"steps", steps_},
                        {"files", files}};
    write_file_atomic(temp_dir / kOptimizerIndex, index.dump(2) + "\n");
  }

 private:
  int64_t steps_;
  std::vector<StatePiece> pieces_;
  int64_t rank_, world_size_;
};

}  // namespace

std::shared_ptr<SavedPart> saved_texts(std::map<std::string, std::string> files) {
  return std::make_shared<SavedTexts>(std::move(files));
}

std::shared_ptr<SavedPart> saved_model(models::ModelConfig config, std::map<std::string, at::Tensor> weights,
                                       std::map<std::string, std::string> texts) {
  return std::make_shared<SavedModel>(std::move(config), std::move(weights), std::move(texts));
}

std::shared_ptr<SavedPart> saved_optimizer(int64_t steps, std::vector<StatePiece> pieces, int64_t rank,
                                           int64_t world_size) {
  return std::make_shared<SavedOptimizer>(steps, std::move(pieces), rank, world_size);
}

std::shared_ptr<SavedPart> ModelPart::save(const SaveRequest& request) {
  // Every rank: bf16 parameters' master weights are gathered to rank 0.
  const std::map<std::string, at::Tensor> master = optimizer_.master_weights();
  if (request.rank != 0) return nullptr;
  std::map<std::string, at::Tensor> weights;
  if (base_json_.empty()) {
    weights = model_->tensors();
  } else {
    for (const auto& [name, p] : models::trainable_parameters(model_)) weights[name] = p.detach();
  }
  for (const auto& [name, t] : master) weights[name] = t;  // frozen parameters have none: their own values
  if (base_json_.empty()) return saved_model(model_->config(), std::move(weights));
  return saved_model(model_->config(), std::move(weights), {{models::kBaseFile, base_json_}});
}

void ModelPart::load(const fs::path& dir) {
  const fs::path file = dir / "model.safetensors";
  auto weights = models::read_safetensors(file.string());
  // Only what trained, on the base this run was built from (checked unchanged): the rest is the model's own.
  if (models::read_base_record(dir.string()))
    for (auto& [name, t] : model_->tensors()) weights.try_emplace(name, t);
  model_->load_tensors(weights, file.string());
  optimizer_.load_master_weights(weights);
}

std::shared_ptr<SavedPart> OptimizerPart::save(const SaveRequest& request) {
  if (!request.with_optimizer_state) return nullptr;
  return saved_optimizer(optimizer_.steps_taken(), optimizer_.state_pieces(), request.rank, request.world_size);
}

void OptimizerPart::load(const fs::path& dir) {
  const auto saved = read_optimizer_state(dir);
  if (saved) optimizer_.load_state(*saved);
  loaded_state_ = saved.has_value();
}

std::shared_ptr<SavedPart> TrainerStatePart::save(const SaveRequest& request) {
  if (request.rank != 0) return nullptr;
  return saved_texts({{"trainer_state.json", state_to_json(state_)}});
}

void TrainerStatePart::load(const fs::path& dir) {
  const fs::path file = dir / "trainer_state.json";
  state_ = state_from_json(read_file(file, "trainer state"), file.string());
}

std::shared_ptr<SavedPart> RandomStatePart::save(const SaveRequest& request) {
  if (request.rank != 0) return nullptr;
  return saved_texts({{"rng_state.json", generators_to_json(capture_generators(device_))}});
}

void RandomStatePart::load(const fs::path& dir) {
  const fs::path file = dir / "rng_state.json";
  if (!fs::exists(file)) return;
  restore_generators(generators_from_json(read_file(file, "random generators' state"), file.string()), device_);
}

std::shared_ptr<SavedPart> RunRecordPart::save(const SaveRequest& request) {
  if (request.rank != 0) return nullptr;
  std::map<std::string, std::string> files = {{"config.yaml", config_yaml_}};
  if (!store_tokenizer_.empty()) files["store_tokenizer.json"] = store_tokenizer_;
  return saved_texts(std::move(files));
}

std::shared_ptr<SavedPart> ConvertersPart::save(const SaveRequest& request) {
  if (request.rank != 0 || converters_.empty()) return nullptr;
  return saved_texts({{models::kConvertersFile, models::converters_to_json(converters_)}});
}

void ConvertersPart::load(const fs::path& dir) {
  const std::string saved = models::converters_to_json(models::read_converters(dir.string()));
  const std::string now = models::converters_to_json(converters_);
  if (saved != now)
    throw InputError("cannot resume from " + dir.string() + ": its model was converted with " +
                     json::parse(saved)["converters"].dump() + ", this run converts it with " +
                     json::parse(now)["converters"].dump() + " (train.freeze must stay as it was)");
}

}  // namespace segtrain::trainer
