#pragma once
// A model on disk as eval, export and inspect take it: a segtrain checkpoint, a
// run directory (its final/) or an HF folder, recognised by content, with
// `--set model.extension...` overrides applied (config/model_values.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/config.h"

namespace segtrain::trainer {

struct StoredModel {
  std::string dir;             // the folder holding the weights (a run's final/)
  models::ModelConfig config;  // the stored config with the overrides applied
};

// InputError naming `path` when it is no model folder, or an override that does not apply.
StoredModel open_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                              std::optional<int64_t> target_length = std::nullopt);

// InputError when token ids of a store with `store_vocab_size` would be out of the model's range.
void check_store_fits(const StoredModel& model, int64_t store_vocab_size, const std::string& store_name);

// `segtrain export`: an HF folder transformers loads (models/hf.h).
void export_stored_model(const std::string& path, const std::vector<std::string>& overrides, const std::string& out);

}  // namespace segtrain::trainer
