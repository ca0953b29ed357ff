#pragma once
// From a run config to a model: resolve the "auto" values, take the base
// (scratch, an HF folder or a segtrain checkpoint/run), apply the run's extension.
#include <string>

#include "models/config.h"
#include "models/transformer.h"
#include "trainer/config.h"

namespace segtrain::trainer {

// The base model's directory for init hf:DIR / checkpoint:DIR; empty for scratch.
std::string init_dir(const std::string& init);

// The concrete ModelConfig of this run:
//   scratch: the config's sizes; vocab_size auto = the store's, d_ff auto = 4*d_model,
//            max_positions auto = data.train_length;
//   hf/checkpoint: the base's stored config; architecture keys given explicitly in the
//            run config must agree with it (InputError otherwise).
// The run's model.extension replaces the base's when model.extension.method is
// given explicitly; factor auto = data.extended_length / data.train_length.
models::ModelConfig resolve_model_config(const LoadedConfig& loaded, int64_t store_vocab_size);

// Builds the model: seeded random init for scratch, else the base's weights
// (an APE table is interpolated when the extension asks for it).
models::TransformerLM build_model(const LoadedConfig& loaded, const models::ModelConfig& model_config);

}  // namespace segtrain::trainer
