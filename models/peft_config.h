#pragma once
// A PEFT LoRA adapter folder's adapter_config.json read as segtrain's LoRA settings, so
// that `model.init: peft:DIR` continues an adapter PEFT (or `segtrain export --adapter`)
// wrote. Torch-free: the run config reads it to fill model.adapters.lora and
// train.trainable before anything loads; peft_adapter.h loads its weights.
//
// PEFT's module matching, for the base's HF module names: a list entry matches a module
// that is named so or ends with "." + the entry; a string is a regular expression the
// whole name must match (re.fullmatch). segtrain adapts a target on every layer or none,
// trains norms, embeddings and the head as whole groups, and holds what PEFT's LoRA holds
// (no DoRA, rsLoRA, per-module ranks or bias): anything else is refused naming the key.
#include <string>
#include <vector>

#include "models/config.h"
#include "models/converters/lora_config.h"

namespace segtrain::models {

struct PeftAdapterConfig {
  LoraConfig lora;                     // rank, alpha, dropout, targets (segtrain's names)
  std::vector<std::string> trainable;  // "adapters" and the groups modules_to_save holds
  std::string base_model;              // base_model_name_or_path as written; "" when null
};

// DIR/adapter_config.json for a base `base` (read from its config.json): InputError
// "DIR/adapter_config.json: KEY: what was expected" on anything segtrain cannot continue.
PeftAdapterConfig read_peft_adapter_config(const std::string& dir, const ModelConfig& base);

// The folder an adapter's base_model_name_or_path names: a folder with config.json as
// written (relative to the working directory, then to the adapter's folder), else the
// snapshot of that model id in the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or
// ~/.cache/huggingface/hub), as transformers finds it offline; "" when none is there.
std::string find_peft_base(const std::string& adapter_dir, const std::string& base_model);

}  // namespace segtrain::models
