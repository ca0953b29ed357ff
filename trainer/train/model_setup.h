#pragma once
// From a run config to a model: read the base (an HF folder or a segtrain
// checkpoint/run) when there is one, resolve the "auto" values
// (config/model_values.h), apply the run's extension, build the weights.
#include <cstdint>

#include "models/config.h"
#include "models/transformer.h"
#include "trainer/config/config.h"

namespace segtrain::trainer {

// The concrete, checked ModelConfig of this run (config/model_values.h has the rules).
models::ModelConfig run_model_config(const LoadedConfig& loaded, int64_t store_vocab_size);

// Builds the model: seeded random init for scratch, else the base's weights
// (an APE table is interpolated when the extension asks for it).
models::TransformerLM build_model(const LoadedConfig& loaded, const models::ModelConfig& model_config);

}  // namespace segtrain::trainer
