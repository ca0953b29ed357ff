#pragma once
// An HF folder's config.json, read in one place for every reader of it: the model's import
// (models/modules/hf.h, through model_io.h), and the run config, which takes a base folder's
// arch and sizes, and a PEFT adapter's base, before anything loads. Plain C++ (no LibTorch),
// so trainer/config calls it; a bad file is refused in the same words wherever it is met.
#include <nlohmann/json.hpp>

#include <string>

#include "models/spec/config.h"
#include "models/spec/families/family.h"

namespace segtrain::models {

// DIR/config.json, parsed, and the family its model_type names.
struct HfConfigJson {
  std::string path;       // DIR/config.json, as errors name it
  nlohmann::json json;    // an object with a string "model_type"
  const Family* family;   // the family that reads that model_type
};

// DIR/config.json and its family. InputError, one line naming the file: it cannot be read,
// is not valid JSON, is not a JSON object with a string "model_type", or names a model_type
// no family reads (the ones segtrain reads listed).
HfConfigJson read_hf_config_json(const std::string& dir);

// The ModelConfig of DIR/config.json, as its family reads it (no weights). A rope scaling
// in transformers 4's rope_scaling or 5's rope_parameters (linear, dynamic, yarn, llama3,
// longrope) becomes the matching extension, in effect from the start; a folder written by
// export_hf gets back the extension recorded in its "segtrain" field when transformers
// could not express it (ALiBi methods). Throws InputError naming config.json and the field
// on an unknown model type or unsupported variant (another rope_type; partial rotary on
// llama; a hidden_act other than silu), and the rules' problem (check_model_config) on a
// model segtrain cannot build. A Mistral/Qwen2 sliding window in effect is kept in
// ModelConfig::sliding_window; forward refuses longer sequences. ModelConfig::hf_model_type
// records the family read, which export_hf writes again where it can.
ModelConfig read_hf_config(const std::string& dir);

}  // namespace segtrain::models
