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

// What `segtrain export` writes besides the weights' source.
struct ExportRequest {
  std::string out;
  std::string dtype = "float32";       // float32 | bfloat16
  std::string max_shard_size = "5GB";  // as transformers' save_pretrained: 5GB, 500MB, 2GiB, bytes
};

// `segtrain export`: an HF folder transformers loads (models/hf.h), with the
// tokenizer files of the model's HF origin (the folder itself, or the hf: base
// a checkpoint was trained from) so the folder is usable as it is.
void export_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                         const ExportRequest& request);

}  // namespace segtrain::trainer
