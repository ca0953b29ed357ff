#include "trainer/config/model_values.h"

#include <algorithm>

#include "common/error.h"
#include "common/strings.h"
#include "models/config_values.h"

namespace segtrain::trainer {

models::ModelConfig resolve_model_config(const LoadedConfig& loaded, const std::optional<models::ModelConfig>& base,
                                         int64_t store_vocab_size) {
  const Config& c = loaded.config;
  models::ModelConfig m = c.model.spec;
  if (!base) {
    if (!m.vocab_size) m.vocab_size = store_vocab_size;
    if (!m.d_ff) m.d_ff = models::d_ff_of(m);
    if (!m.max_positions) m.max_positions = c.data.train_length;
  } else {
    m = *base;
    // Explicit shape keys must describe the base, not silently be ignored.
    Config base_as_run = c;
    base_as_run.model.spec = m;
    std::vector<std::string> conflicts;
    for (const auto& key : keys_with(KeyRole::model_shape)) {
      if (!loaded.origins.count(key)) continue;
      const std::string mine = key_text(c, key), theirs = key_text(base_as_run, key);
      if (mine != theirs && mine != "auto")
        conflicts.push_back(loaded.locate(key) + ": " + mine + " conflicts with the base model's " +
                            theirs + " (" + c.model.init + "); remove the key or make it match");
    }
    if (!conflicts.empty()) throw InputError(join(conflicts, "\n"));
    if (loaded.origins.count("model.extension.method")) m.extension = c.model.spec.extension;
  }
  m.activation_checkpointing = c.model.spec.activation_checkpointing;
  if (m.extension.method != models::ExtensionMethod::none && !m.extension.factor)
    m.extension.factor = static_cast<double>(c.data.extended_length) / static_cast<double>(c.data.train_length);
  // segtrain has no sliding-window attention: a window shorter than any sequence
  // this run feeds the model (L_e windows, evaluation lengths) is refused up front.
  if (m.sliding_window) {
    int64_t longest = std::max(c.data.extended_length, c.data.train_length);
    for (int64_t length : c.eval.lengths) longest = std::max(longest, length);
    if (*m.sliding_window < longest)
      throw InputError("sliding_window: the base model " + c.model.init + " attends within a sliding window of " +
                       std::to_string(*m.sliding_window) + " tokens (config.json sliding_window), but this run uses "
                       "sequences of up to " + std::to_string(longest) +
                       " tokens; segtrain does not implement sliding-window attention");
  }
  if (m.vocab_size && *m.vocab_size < store_vocab_size)
    throw InputError("model.vocab_size: the model has " + std::to_string(*m.vocab_size) + " tokens but the store '" +
                     c.data.store + "' uses " + std::to_string(store_vocab_size) + "; token ids would be out of range");
  return m;
}

models::ModelConfig apply_model_overrides(const models::ModelConfig& stored, const std::vector<std::string>& overrides,
                                          std::optional<int64_t> target_length) {
  LoadedConfig loaded;
  loaded.config.model.spec = stored;
  for (const auto& a : overrides) {
    if (!key_has(a.substr(0, a.find('=')), KeyRole::stored_model))
      throw InputError("--set " + a + ": only " + join(keys_with(KeyRole::stored_model), ", ") +
                       " can be set on a stored model");
    apply_override(loaded, a);
  }
  auto spec = loaded.config.model.spec;
  // The stored length is what the model was trained at unless the user says otherwise.
  if (spec.extension.method != stored.extension.method && !spec.extension.original_length &&
      stored.extension.method == models::ExtensionMethod::none)
    spec.extension.original_length = spec.max_positions;
  if (spec.extension.method != models::ExtensionMethod::none && !spec.extension.factor && target_length) {
    const int64_t original = spec.extension.original_length.value_or(spec.max_positions.value_or(*target_length));
    spec.extension.factor =
        std::max(models::kMinExtensionFactor, static_cast<double>(*target_length) / static_cast<double>(original));
  }
  if (spec.extension.method != models::ExtensionMethod::none && !spec.extension.factor)
    throw InputError("--set model.extension.factor=<number> is needed with model.extension.method=" +
                     std::string(enum_name(models::kExtensionMethods, spec.extension.method)) +
                     " (auto needs data.train_length and data.extended_length, which a stored model lacks)");
  return spec;
}

}  // namespace segtrain::trainer
