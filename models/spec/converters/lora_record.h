#pragma once
// LoRA's settings as the files that keep them write them, without LibTorch: its entry in
// converters.json (models/modules/converters/converter.h), which a checkpoint rebuilds its converter
// from, and its own fields of PEFT's adapter_config.json (models/modules/peft_adapter.h writes the
// file, models/spec/families/peft_config.h reads it), so that one file says what each format holds.
#include <nlohmann/json.hpp>

#include <string>

#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

// {"name": "lora", "rank", "alpha", "dropout", "targets", "trainable"}, and "use_dora": true for DoRA.
nlohmann::json lora_record(const LoraConfig& lora);
// The settings an entry of lora_record's form holds; InputError naming `source` and the keys
// expected when it holds other values.
LoraConfig lora_from_record(const nlohmann::json& entry, const std::string& source);

// adapter_config.json's r, lora_alpha, lora_dropout and the variants segtrain's adapters are not
// (use_rslora) or are as `lora` says.
nlohmann::json peft_lora_fields(const LoraConfig& lora);

}  // namespace segtrain::models
