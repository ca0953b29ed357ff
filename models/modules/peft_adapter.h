#pragma once
// A LoRA model's adapters as PEFT writes them and reads them back (adapter_config.json and
// adapter_model.safetensors), so that peft.PeftModel.from_pretrained(base, DIR) on the HF
// export of the model's base gives the model segtrain trained:
//   adapters     "base_model.model.<HF module>.lora_A.weight" / ".lora_B.weight"; the
//                adapted modules listed by their full HF paths in target_modules (GPT-2's
//                attention output and MLP down are both "c_proj": a suffix would adapt both)
//   the rest of  what trained (train.trainable's norms, embeddings, head) as PEFT's
//                modules_to_save, saved as "base_model.model.<HF name>"
// GPT-2's Conv1D holds its weight transposed: fan_in_fan_out, as PEFT sets it there.
#include <ATen/ATen.h>

#include <string>

#include "models/modules/transformer.h"
#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

struct PeftAdapterOptions {
  std::string base_model;  // adapter_config.json's base_model_name_or_path ("" : null)
  at::ScalarType dtype = at::kFloat;
};

// `model` converted by a LoRA converter of settings `lora` (its parameters that require a
// gradient are what trained). InputError when the model has no adapter, when the
// family fuses an adapted projection with others (Phi-3's qkv_proj: PEFT would adapt the
// fused one), or when the head trained (or the token table a head is tied to): PEFT's
// modules_to_save does not give those back; export the merged model instead.
void export_peft_adapter(const TransformerLM& model, const LoraConfig& lora, const std::string& dir,
                         const PeftAdapterOptions& options = {});

// Loads DIR/adapter_model.safetensors into `model`, converted by the LoRA converter of the
// adapter's settings (models/spec/families/peft_config.h read_peft_adapter_config): each adapter's lora_A and
// lora_B, and each modules_to_save weight over the base's (a trainable group the file does not
// hold keeps the base's). InputError naming the file and tensor when an adapter is missing, a
// tensor has another shape, is no parameter the model trains, is not floating point (naming its
// dtype), or holds a NaN or an infinite value. float16, bfloat16 and float32 are held as the
// parameter's dtype; a tensor that holding rounds (float64 in float32) is said in a log line.
// Returns how many tensors it loaded.
int64_t load_peft_adapter(TransformerLM& model, const std::string& dir);

// `model` (the adapter's base) with DIR's adapter on it, as eval and generate take a PEFT folder:
// converted by LoRA of the settings its adapter_config.json holds (read against the model's config)
// and load_peft_adapter's tensors loaded. Returns how many tensors it loaded.
int64_t apply_peft_adapter(TransformerLM& model, const std::string& dir);

}  // namespace segtrain::models
