#pragma once
// `--set model.extension...` on a stored model (export, inspect, eval): the same
// parsing and checks as a run config's keys, applied to the stored ModelConfig.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/config.h"
#include "trainer/config.h"

namespace segtrain::trainer {

// Only keys that do not change the weights' shapes may be overridden on a
// trained model: model.extension.* and model.rope.theta. A factor left at auto
// stretches the model to `target_length` when one is given (eval: the longest
// evaluated length); otherwise it must be given.
inline models::ModelConfig apply_model_overrides(const models::ModelConfig& stored,
                                                 const std::vector<std::string>& overrides,
                                                 std::optional<int64_t> target_length = std::nullopt) {
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
  // The stored length is what the model was trained at unless the user says otherwise.
  if (spec.extension.method != stored.extension.method && !spec.extension.original_length &&
      stored.extension.method == models::ExtensionMethod::none)
    spec.extension.original_length = spec.max_positions;
  if (spec.extension.method != models::ExtensionMethod::none && !spec.extension.factor && target_length) {
    const int64_t original = spec.extension.original_length.value_or(spec.max_positions.value_or(*target_length));
    spec.extension.factor = std::max(1.0, static_cast<double>(*target_length) / static_cast<double>(original));
  }
  if (spec.extension.method != models::ExtensionMethod::none && !spec.extension.factor)
    throw InputError("--set model.extension.factor=<number> is needed with model.extension.method=" +
                     std::string(enum_name(models::kExtensionMethods, spec.extension.method)) +
                     " (auto needs data.train_length and data.extended_length, which a stored model lacks)");
  return spec;
}

}  // namespace segtrain::trainer
