#pragma once
// LoRA's settings as the files that keep them name them, without LibTorch: the run config
// (model.adapters.lora.KEY), its entry in converters.json (models/modules/converters/converter.h),
// which a checkpoint rebuilds its converter from, and its own fields of PEFT's
// adapter_config.json (models/modules/peft_adapter.h writes the file, this file reads and writes
// those fields, models/spec/families/peft_config.h reads the rest), so that one file says what
// each format holds. A setting LoRA gains is a field of LoraConfig and a row of kLoraSettings
// (lora_config.h) and its lines here (lora_record.cpp).
#include <nlohmann/json.hpp>

#include <string>

#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

// Each row of kLoraSettings by its record name, whatever its value: what a continued adapter's
// settings are compared by.
nlohmann::json lora_settings_json(const LoraConfig& lora);
// converters.json's entry: {"name": "lora", "trainable", and lora_settings_json's values}, less a false
// DoRA flag, so that a LoRA record reads as it did before DoRA (an older segtrain continues it).
nlohmann::json lora_record(const LoraConfig& lora);
// The settings an entry of lora_record's form holds (a record written before DoRA, without its
// flag, is LoRA); InputError naming `source` and the keys expected when it holds other values.
LoraConfig lora_from_record(const nlohmann::json& entry, const std::string& source);

// adapter_config.json's r, lora_alpha, lora_dropout and the variants segtrain's adapters are not
// (use_rslora) or are as `lora` says (DoRA).
nlohmann::json peft_lora_fields(const LoraConfig& lora);
// The settings those fields of PEFT's `config` (read from `file`) hold: rank, alpha, dropout and
// DoRA's flag (targets and trainable are the base's module names, which peft_config.h matches);
// InputError "file: KEY: what was expected" for a value segtrain cannot continue.
LoraConfig lora_from_peft_fields(const nlohmann::json& config, const std::string& file);

}  // namespace segtrain::models
