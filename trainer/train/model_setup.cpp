#include "trainer/train/model_setup.h"

#include <filesystem>

#include <torch/utils.h>  // torch::manual_seed

#include "data/token_store.h"
#include "models/modules/converters/converter.h"
#include "models/modules/model_io.h"
#include "models/spec/config_rules.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/resolved_model.h"

namespace segtrain::trainer {

models::ModelConfig run_model_config(const LoadedConfig& loaded, std::optional<int64_t> store_vocab_size) {
  const std::string base_dir = model_ref_dir(loaded.config.model.init);
  std::optional<models::ModelConfig> base;
  if (!base_dir.empty()) base = models::read_model_config(base_dir);
  models::ModelConfig m = resolve_model_config(loaded, base, store_vocab_size);
  models::check_model_config(m);
  return m;
}

Config resolved_run_config(const LoadedConfig& loaded) {
  std::optional<int64_t> store_vocab_size;
  if (std::filesystem::exists(std::filesystem::path(loaded.config.data.store) / "meta.json"))
    store_vocab_size = data::read_meta(loaded.config.data.store).vocab_size;
  Config resolved = loaded.config;
  resolved.model.spec = run_model_config(loaded, store_vocab_size);
  return resolved;
}

models::TransformerLM build_model(const LoadedConfig& loaded, const models::ModelConfig& model_config) {
  // Every random draw of a run comes from its seed: a scratch model's weights, and a
  // converted base's new ones (LoRA's A) after a load that draws nothing.
  torch::manual_seed(static_cast<uint64_t>(loaded.config.run.seed));
  const std::string base_dir = model_ref_dir(loaded.config.model.init);
  if (base_dir.empty()) return models::TransformerLM(model_config);
  // Its time is said with the conversion's (trainer_setup.cpp: "base loaded and converted in X s").
  return models::load_model(base_dir, model_config, models::WeightDtype::as_stored, /*say_time=*/false);
}

models::Converters model_converters(const Config& config) {
  return models::make_converters({config.model.adapters.lora, config.train.freeze});
}

}  // namespace segtrain::trainer
