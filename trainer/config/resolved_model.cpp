#include "trainer/config/resolved_model.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "common/strings.h"
#include "models/spec/auto_values.h"

namespace segtrain::trainer {

void resolve_extension_lengths(models::ModelConfig& m, int64_t target_length, const std::string& whose) {
  if (m.extension.method == models::ExtensionMethod::none) return;
  if (!m.extension.original_length) m.extension.original_length = models::max_positions_of(m);
  if (m.extension.factor) return;
  m.extension.factor = models::auto_extension_factor(target_length, *m.extension.original_length);
  if (*m.extension.factor == models::kMinExtensionFactor)
    log::info("model.extension.factor auto = 1: ", target_length, " tokens fit ", whose, "'s ",
              *m.extension.original_length, " positions (model.extension.original_length), so ",
              enum_name(models::kExtensionMethods, m.extension.method), " leaves them as they are");
}

models::ModelConfig resolve_model_config(const LoadedConfig& loaded, const std::optional<models::ModelConfig>& base,
                                         std::optional<int64_t> store_vocab_size) {
  const Config& c = loaded.config;
  models::ModelConfig m = c.model.spec;
  if (!base) {
    if (!m.vocab_size) m.vocab_size = store_vocab_size;  // still auto when the store is not there yet
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
    if (loaded.origins.count("model.extension.method")) {
      // The run's extension replaces the base's, but still starts from the length
      // the base was trained at (a YaRN base's original, not its stretched one).
      const auto trained_at = base->extension.method != models::ExtensionMethod::none
                                  ? base->extension.original_length : std::nullopt;
      m.extension = c.model.spec.extension;
      if (!m.extension.original_length) m.extension.original_length = trained_at;
    }
  }
  m.activation_checkpointing = c.model.spec.activation_checkpointing;
  for (const auto& problem : checkpointed_block_problems(m.activation_checkpointing, m.n_layers))
    throw InputError(loaded.locate(problem.key) + ": " + problem.message);
  resolve_extension_lengths(m, c.data.extended_length, base ? "the base " + c.model.init : "the model");
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
  if (m.vocab_size && store_vocab_size && *m.vocab_size < *store_vocab_size)
    throw InputError("model.vocab_size: the model has " + std::to_string(*m.vocab_size) + " tokens but the store '" +
                     c.data.store + "' uses " + std::to_string(*store_vocab_size) + "; token ids would be out of range");
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
  if (target_length && spec.max_positions) resolve_extension_lengths(spec, *target_length, "the model");
  if (spec.extension.method != models::ExtensionMethod::none && !spec.extension.factor)
    throw InputError("--set model.extension.factor=<number> is needed with model.extension.method=" +
                     std::string(enum_name(models::kExtensionMethods, spec.extension.method)) +
                     " (auto needs data.train_length and data.extended_length, which a stored model lacks)");
  return spec;
}

}  // namespace segtrain::trainer
