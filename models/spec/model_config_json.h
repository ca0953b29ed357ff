#pragma once
// segtrain's own record of a model's shape, model_config.json (ModelConfig as JSON), beside
// model.safetensors in every checkpoint and run output: written and read here alone, without
// LibTorch, so that loading a model (models/modules/model_io.h) and the run config's checks
// of a base folder (its arch, its sizes) read it one way.
#include <string>

#include "models/spec/config.h"

namespace segtrain::models {

inline constexpr const char* kModelConfigFile = "model_config.json";

std::string model_config_to_json(const ModelConfig& config);
// InputError "source: not a valid model_config.json (...)" for text that is not one.
ModelConfig model_config_from_json(const std::string& text, const std::string& source);

// DIR, or DIR/final for a run directory (no model_config.json or config.json of its own).
std::string segtrain_model_folder(const std::string& dir);
// The ModelConfig in segtrain_model_folder(DIR)'s model_config.json; InputError naming the file
// when it cannot be read or is not one.
ModelConfig read_segtrain_model_config(const std::string& dir);

}  // namespace segtrain::models
