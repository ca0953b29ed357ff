#include "models/peft_adapter.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <stdexcept>
#include <utility>

#include "common/atomic_write.h"
#include "common/error.h"
#include "models/converters/converter.h"
#include "models/families/family.h"
#include "models/safetensors.h"

namespace segtrain::models {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPeftPrefix = "base_model.model.";

// Our parameter's full HF name and whether transformers holds it transposed.
std::pair<std::string, bool> hf_name(const Family& family, const std::string& ours) {
  const HfNameTable& table = family.names();
  for (const auto& row : table.tensors)
    if (auto hf = rename_slot(row.ours, row.hf, ours)) return {(row.prefixed ? table.prefix : "") + *hf, row.transpose};
  for (const auto& row : table.fused)
    for (const auto& part : row.parts)
      if (const auto hf = rename_slot(part, row.hf, ours))
        throw InputError("export --adapter: " + ours + " is part of " + family.model_type() + "'s fused tensor " +
                         (row.prefixed ? table.prefix : "") + *hf + ", which PEFT would adapt as one projection; export the merged model (without "
                         "--adapter) instead");
  throw std::logic_error("no HF name for parameter " + ours);
}

}  // namespace

void export_peft_adapter(const TransformerLM& model, int64_t rank, double alpha, double dropout,
                         const std::string& dir, const PeftAdapterOptions& options) {
  const Family& family = family_for_export(model->config());
  // PEFT's modules_to_save wraps a copy of a module: an LM head (tied or not) does not come back
  // as trained there (checked against PEFT 0.21 on GPT-2, GPT-NeoX and BLOOM), nor does a
  // trained token table whose head is tied to it.
  const bool tied_head = !model->lm_head;
  for (const auto& [name, p] : trainable_parameters(model))
    if (name == "lm_head.weight" || (tied_head && name == "wte.weight"))
      throw InputError("export --adapter: the run trained " + std::string(tied_head ? "the token table, which the "
                       "head is tied to" : "the LM head") + " (train.trainable), which PEFT's modules_to_save does "
                       "not give back as trained; export the merged model (without --adapter) instead");
  TensorMap tensors;
  std::set<std::string> targets, saved_modules;
  bool transposed = false;
  for (const auto& [name, p] : trainable_parameters(model)) {
    const auto value = p.detach().to(at::kCPU, options.dtype).contiguous();
    if (const auto lora = name.find(".lora_"); lora != std::string::npos) {
      const auto [weight, transpose] = hf_name(family, name.substr(0, lora) + ".weight");
      const std::string module = weight.substr(0, weight.size() - std::string(".weight").size());
      targets.insert(module);
      transposed = transposed || transpose;
      tensors[kPeftPrefix + module + name.substr(lora)] = value;  // "...q_proj" + ".lora_A.weight"
    } else {
      const auto [hf, transpose] = hf_name(family, name);
      tensors[kPeftPrefix + hf] = transpose ? value.t().contiguous() : value;
      saved_modules.insert(hf.substr(0, hf.rfind('.')));
    }
  }
  if (targets.empty())
    throw InputError("export --adapter: the model has no LoRA adapter (a run with model.adapters.lora.rank > 0 has)");
  const nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", rank},
      {"lora_alpha", alpha},
      {"lora_dropout", dropout},
      {"target_modules", targets},
      {"modules_to_save", saved_modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(saved_modules)},
      {"fan_in_fan_out", transposed},
      {"bias", "none"},
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"base_model_name_or_path", options.base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.base_model)}};
  fs::create_directories(dir);
  write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomic(fs::path(dir) / "adapter_config.json", config.dump(2) + "\n");
}

}  // namespace segtrain::models
