#pragma once
// A PEFT LoRA adapter folder's adapter_config.json read as segtrain's LoRA settings, so
// that `model.init: peft:DIR` continues an adapter PEFT (or `segtrain export --adapter`)
// wrote. Torch-free: the run config reads it to fill model.adapters.lora and
// train.trainable before anything loads; models/modules/peft_adapter.h loads its weights.
//
// PEFT's module matching, for the base's HF module names: a list entry matches a module
// that is named so or ends with "." + the entry; a string is a regular expression the
// whole name must match (re.fullmatch). segtrain adapts a target on every layer or none,
// trains norms, embeddings and the head as whole groups, and holds what PEFT's LoRA holds
// (LoRA or DoRA; no rsLoRA, per-module ranks or bias): anything else is refused naming the key.
//
// The file is outside input, read within bounds before anything is built from it: its size
// before it is read, its nesting before its values are, the names it lists before they are
// matched, and a regular expression runs in RE2, which matches in time linear in the name
// (Python's re.fullmatch semantics for what RE2 expresses; backreferences and lookaround,
// which it cannot, are refused naming the key).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/spec/config.h"
#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

struct PeftAdapterConfig {
  LoraConfig lora;         // rank, alpha, dropout, targets (segtrain's names); trainable: "adapters" and
                           // the groups modules_to_save holds
  std::string base_model;  // base_model_name_or_path as written; "" when null
};

// PEFT writes about 1 KB, two levels deep, with a few names in target_modules.
inline constexpr int64_t kMaxAdapterConfigBytes = int64_t{1} << 20;  // 1 MiB
inline constexpr int kMaxAdapterConfigDepth = 32;
inline constexpr size_t kMaxModuleNames = 10'000;        // entries of target_modules or modules_to_save
inline constexpr size_t kMaxModulePatternChars = 10'000;  // characters of one regular expression

// DIR/adapter_config.json's base_model_name_or_path ("" when it is null or not there): InputError
// naming the file and the cause when the file cannot be read, is larger than
// kMaxAdapterConfigBytes, is not UTF-8, not JSON, nested deeper than kMaxAdapterConfigDepth or
// not an object.
std::string read_peft_base_model(const std::string& dir);

// DIR/adapter_config.json for a base `base` (read from its config.json): InputError
// "DIR/adapter_config.json: KEY: what was expected" on anything segtrain cannot continue.
PeftAdapterConfig read_peft_adapter_config(const std::string& dir, const ModelConfig& base);

// The folder an adapter's base_model_name_or_path names: a folder with config.json as
// written (relative to the working directory, then to the adapter's folder), else the
// snapshot of that model id in the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or
// ~/.cache/huggingface/hub), as transformers finds it offline; "" when none is there.
std::string find_peft_base(const std::string& adapter_dir, const std::string& base_model);

}  // namespace segtrain::models
