#pragma once
// The resolved model: the concrete ModelConfig a command works with, from a run config's
// `auto` values (each key's meaning: models/spec/auto_values.h) or from a stored model plus
// `--set` overrides. One home for these rules so train, eval, inspect and the experiment
// grid resolve a model the same way.
// No torch: the caller reads a stored base's ModelConfig (models/modules/model_io.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/spec/config.h"
#include "trainer/config/config.h"

namespace segtrain::trainer {

// The ModelConfig of a run:
//   scratch (no base): the config's sizes; vocab_size auto = `store_vocab_size`
//            (left auto when it is nullopt: a store not prepared yet),
//            d_ff auto = 4 * d_model, max_positions auto = data.train_length;
//   from a base: the base's stored config; model-shape keys given explicitly in
//            the run config must agree with it (InputError otherwise), and the
//            run's model.extension replaces the base's when its method is given.
// With an extension method, original_length auto = the base's trained length
// (its extension's original_length, else max_positions; a scratch model's
// max_positions is data.train_length) and factor auto = data.extended_length /
// original_length, 1 when L_e fits (resolve_extension_lengths). A model smaller
// than the store's vocabulary is an InputError.
models::ModelConfig resolve_model_config(const LoadedConfig& loaded, const std::optional<models::ModelConfig>& base,
                                         std::optional<int64_t> store_vocab_size);

// Fills an extension's auto original_length (max_positions) and auto factor
// (models::auto_extension_factor to `target_length`), with a note when the
// factor comes out 1; `whose` names the model in that note.
void resolve_extension_lengths(models::ModelConfig& model, int64_t target_length, const std::string& whose);

// `--set model.extension...` on a stored model (eval, export, inspect): only keys
// with KeyRole::stored_model, parsed and checked as in a run config. A factor
// left at auto stretches the model to `target_length` when one is given (eval:
// the longest evaluated length); otherwise it must be given.
models::ModelConfig apply_model_overrides(const models::ModelConfig& stored, const std::vector<std::string>& overrides,
                                          std::optional<int64_t> target_length = std::nullopt);

}  // namespace segtrain::trainer
