#pragma once
// `segtrain export --adapter`: a LoRA run's adapters as a PEFT folder, read from what the run
// saved and nothing else. A run converted from a base saves only what trained (base.json,
// models/spec/base_record.h): its adapters and the groups train.trainable adds are the whole export,
// so neither the base's weights nor the merged model are read or built (SmolLM2-135M: a 3.8 MB
// adapter once took 12 s and 2.2 GB of memory to export, the base loaded and a model initialised).
#include <ATen/ATen.h>

#include <filesystem>
#include <string>

#include "trainer/eval/stored_model.h"

namespace segtrain::trainer {

// Writes `stored`'s LoRA adapters to `out` (adapter_config.json and adapter_model.safetensors,
// models/modules/peft_adapter.h) in `dtype`, base_model_name_or_path `origin` ("" : null). The model is
// built without drawing or writing its weights (models/modules/weight_init.h), converted as its
// converters.json says, and only the parameters that train are filled, each from the run's own
// file. InputError when the run trained no LoRA adapter, when its file lacks a parameter that
// trains or holds it in another shape, and as models::export_peft_adapter refuses. A base whose
// files base.json records are gone or of another size since is said in a warning (the export is
// the adapter as trained; its base is read only by what loads it).
void export_run_lora_adapter(const StoredModel& stored, const std::filesystem::path& out, const std::string& origin,
                             at::ScalarType dtype);

}  // namespace segtrain::trainer
