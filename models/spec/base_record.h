#pragma once
// What a model directory that holds only what trained completes: a run converted from a
// base (model.init hf: or checkpoint: with LoRA or train.freeze) saves its trainable
// tensors alone, and base.json names the base's folder with each file's size and digest.
// Loading such a directory (models/modules/model_io.h) reads the base again, after checking that it is
// still the one the run trained on.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/file_digest.h"

namespace segtrain::models {

inline constexpr const char* kBaseFile = "base.json";

struct BaseFile {
  std::string name;  // in the base's folder
  int64_t bytes = 0;
  std::string digest;  // common/file_digest.h, of the record's kind
};

struct BaseRecord {
  std::string folder;  // absolute
  // XXH3 ("xxh3_64" in base.json); records of earlier versions say "fnv1a64" and are checked so.
  DigestKind digest = DigestKind::xxh3_64;
  std::vector<BaseFile> files;
  int64_t bytes() const;
};

// The files of model folder `folder` (a checkpoint or an HF folder, as model.init names it)
// that loading it reads, each read whole for its digest (on several threads): its weights
// (*.safetensors and their index) and its records (config.json or model_config.json,
// converters.json, base.json). Its README or tokenizer files may change without refusal.
BaseRecord record_base(const std::string& folder);
std::string base_record_to_json(const BaseRecord& record);

// base.json's text as a record (`source` names it in errors); InputError when malformed.
// Nothing is read from the base.
BaseRecord base_record_from_json(const std::string& text, const std::string& source);

// `dir`'s base.json, nullopt when it has none. InputError naming base.json when it is
// malformed, and naming the base's file that is gone or changed since (size, then digest).
std::optional<BaseRecord> read_base_record(const std::string& dir);

}  // namespace segtrain::models
