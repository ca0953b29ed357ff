#pragma once
// `model.init: peft:DIR`: a run that continues a PEFT LoRA adapter takes its settings
// from the adapter (models/spec/families/peft_config.h), so that the adapter's weights fit the model
// the run builds and what it trained keeps training.
#include <string>
#include <vector>

#include "models/spec/config.h"
#include "trainer/config/config.h"

namespace segtrain::trainer {

// model.adapters.lora.{rank, alpha, targets, dropout} and train.trainable that the config
// leaves out become the adapter's (their origin: DIR/adapter_config.json); a rank, alpha or
// targets the config gives must be the adapter's, and a train.trainable it gives must hold
// what the adapter trained (a checkpoint keeps only what trains). Returns the problems,
// each "<where>: key: message"; nothing for any other model.init, or an adapter or base
// the validator refuses.
std::vector<std::string> adopt_peft_adapter(LoadedConfig& loaded);

}  // namespace segtrain::trainer
