#pragma once
// `--set model.extension...` on a stored model (export, inspect, eval): the same
// parsing and checks as a run config's keys, applied to the stored ModelConfig.
#include <string>
#include <vector>

#include "common/error.h"
#include "models/config.h"
#include "trainer/config.h"

namespace segtrain::trainer {

// Only keys that do not change the weights' shapes may be overridden on a
// trained model: model.extension.* and model.rope.theta.
inline models::ModelConfig apply_model_overrides(const models::ModelConfig& stored,
                                                 const std::vector<std::string>& overrides) {
  LoadedConfig loaded;
  loaded.config.model.spec = stored;
  for (const auto& a : overrides) {
    const bool allowed = a.rfind("model.extension.", 0) == 0 || a.rfind("model.rope.theta=", 0) == 0 ||
                         a.rfind("model.activation_checkpointing=", 0) == 0;
    if (!allowed)
      throw InputError("--set " + a + ": only model.extension.*, model.rope.theta and "
                       "model.activation_checkpointing can be set on a stored model");
    apply_override(loaded, a);
  }
  auto spec = loaded.config.model.spec;
  if (spec.extension.method != models::ExtensionMethod::none && !spec.extension.factor)
    throw InputError("--set model.extension.factor=<number> is needed with model.extension.method=" +
                     std::string(enum_name(models::kExtensionMethods, spec.extension.method)) +
                     " (auto needs data.train_length and data.extended_length, which a stored model lacks)");
  // The stored length is what the model was trained at unless the user says otherwise.
  if (spec.extension.method != stored.extension.method && !spec.extension.original_length &&
      stored.extension.method == models::ExtensionMethod::none)
    spec.extension.original_length = spec.max_positions;
  return spec;
}

}  // namespace segtrain::trainer
