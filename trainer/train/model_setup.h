#pragma once
// From a run config to a model: read the base (an HF folder or a segtrain
// checkpoint/run) when there is one, resolve the "auto" values
// (config/resolved_model.h), apply the run's extension, build the weights.
#include <cstdint>
#include <optional>

#include "models/modules/converters/converter.h"
#include "models/modules/transformer.h"
#include "models/spec/config.h"
#include "trainer/config/config.h"

namespace segtrain::trainer {

// The concrete, checked ModelConfig of this run (config/resolved_model.h has the
// rules); vocab_size stays auto when `store_vocab_size` is nullopt (config check
// before the store is prepared).
models::ModelConfig run_model_config(const LoadedConfig& loaded, std::optional<int64_t> store_vocab_size);

// The config as `train` would run it: model.* resolved from the base (its shape,
// positions, extension, original_length and factor), vocab_size from the store
// when it is already prepared.
Config resolved_run_config(const LoadedConfig& loaded);

// Builds the model after seeding torch's generator with run.seed: random init for
// scratch, else the base's weights in the dtype stored (an APE table is interpolated when
// the extension asks for it); the trainer then gives each parameter its dtype.
models::TransformerLM build_model(const LoadedConfig& loaded, const models::ModelConfig& model_config);

// The model converters the config asks for, in the order they apply
// (models/modules/converters/): train.freeze.
models::Converters model_converters(const Config& config);

}  // namespace segtrain::trainer
