#include "models/modules/peft_adapter.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <sstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/lora.h"
#include "models/modules/safetensors.h"
#include "models/spec/converters/lora_config.h"
#include "models/spec/families/family.h"
#include "models/spec/families/peft_config.h"

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

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// The parameter of ours that the HF tensor `hf` (without PEFT's prefix) is, with whether
// transformers holds it transposed; nullopt for none.
std::optional<std::pair<std::string, bool>> our_name(const Family& family, const std::string& hf) {
  const HfNameTable& table = family.names();
  for (const auto& row : table.tensors)
    if (auto ours = rename_slot((row.prefixed ? table.prefix : "") + row.hf, row.ours, hf))
      return std::pair{*ours, row.transpose};
  return std::nullopt;
}

// The adapter tensor our parameter `name` is ("…q_proj.lora_A.weight"), nullptr for a weight of the base.
const LoraTensor* adapter_tensor(const std::string& name) {
  for (const auto& part : kLoraTensors)
    if (name.ends_with(part.ours)) return &part;
  return nullptr;
}

// A stored dtype as a user reads it: torch's name and safetensors' ("int8 (I8)").
std::string dtype_text(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return "float64 (F64)";
    case at::kFloat: return "float32 (F32)";
    case at::kHalf: return "float16 (F16)";
    case at::kBFloat16: return "bfloat16 (BF16)";
    case at::kLong: return "int64 (I64)";
    case at::kInt: return "int32 (I32)";
    case at::kShort: return "int16 (I16)";
    case at::kChar: return "int8 (I8)";
    case at::kByte: return "uint8 (U8)";
    case at::kBool: return "bool (BOOL)";
    default: return c10::toString(type);
  }
}

// An adapter's weights are floating point: an integer tensor is refused naming it and its dtype.
void check_floating(const at::Tensor& value, const std::string& file, const std::string& key) {
  if (!at::isFloatingType(value.scalar_type()))
    throw InputError(file + ": tensor " + key + " is " + dtype_text(value.scalar_type()) +
                     "; an adapter's weights are floating point (float32, bfloat16, float16 or float64)");
}

// `value` (tensor `key` of `file`) in the parameter's dtype `held`, every value finite there (a
// float64 past float32's range would be infinite). *rounded: holding it changed a value.
at::Tensor adapter_weight(const at::Tensor& value, at::ScalarType held, const std::string& file,
                          const std::string& key, bool* rounded) {
  at::Tensor out = value.to(held);
  if (const int64_t bad = value.numel() - at::isfinite(out).sum().item<int64_t>(); bad > 0)
    throw InputError(file + ": tensor " + key + " holds " + std::to_string(bad) + " NaN or infinite value" +
                     (bad == 1 ? "" : "s") + " (of " + std::to_string(value.numel()) +
                     (held == value.scalar_type() ? "" : ", held as " + dtype_text(held)) +
                     "): a model with them computes nothing; use an adapter whose weights are finite");
  *rounded = held != value.scalar_type() && !at::equal(out.to(value.scalar_type()), value);
  return out;
}

}  // namespace

int64_t load_peft_adapter(TransformerLM& model, const std::string& dir) {
  const std::string file = (fs::path(dir) / "adapter_model.safetensors").string();
  const Family& family = family_for_export(model->config());
  std::map<std::string, at::Tensor> trainable;
  for (const auto& [name, p] : trainable_parameters(model)) trainable.emplace(name, p);
  std::set<std::string> loaded;
  std::map<std::string, int64_t> rounded;  // "float64 (F64) as float32 (F32)": tensors
  at::NoGradGuard no_grad;
  for (const auto& [key, value] : read_safetensors(file)) {
    if (!key.starts_with(kPeftPrefix)) throw InputError(file + ": tensor " + key + " is not a PEFT model's (" + kPeftPrefix + "...)");
    check_floating(value, file, key);
    std::string hf = key.substr(std::string(kPeftPrefix).size());
    // PEFT writes the default adapter's tensors without its name; a named one would be another adapter.
    std::string lora_part;
    for (const auto& part : kLoraTensors)
      if (hf.ends_with(part.peft)) lora_part = part.ours, hf = hf.substr(0, hf.size() - std::string(part.peft).size()) + ".weight";
    const auto ours = our_name(family, hf);
    if (!ours) throw InputError(file + ": tensor " + key + " is no weight of the " + family.model_type() + " base");
    const std::string name = lora_part.empty() ? ours->first
                                               : ours->first.substr(0, ours->first.size() - 7) + lora_part;  // "…q_proj" + ".lora_A.weight"
    const auto target = trainable.find(name);
    if (target == trainable.end())
      throw InputError(file + ": tensor " + key + " (" + name + ") is not a parameter this run trains: "
                       "adapter_config.json's target_modules and modules_to_save do not name it");
    const at::Tensor source = lora_part.empty() && ours->second ? value.t() : value;
    if (source.sizes() != target->second.sizes())
      throw InputError(file + ": tensor " + key + " has shape " + shape_text(source) + ", the model's " + name + " " +
                       shape_text(target->second));
    bool changed = false;
    target->second.copy_(adapter_weight(source, target->second.scalar_type(), file, key, &changed));
    if (changed) ++rounded[dtype_text(value.scalar_type()) + " are held as " + dtype_text(target->second.scalar_type())];
    loaded.insert(name);
  }
  // float16, bfloat16 and float32 are held exactly in float32; float64 (or float32 in bf16 weights) is rounded.
  for (const auto& [how, count] : rounded)
    log::info(file, ": ", count, " tensor", count == 1 ? "" : "s", " stored as ", how, ", rounded");
  // Every adapter comes from the file. What else trains may start from the base's weights: a group
  // train.trainable adds to what the adapter saved (its modules_to_save) was never trained.
  for (const auto& [name, p] : trainable)
    if (adapter_tensor(name) && !loaded.count(name))
      throw InputError(file + ": holds no " + name + ", an adapter its adapter_config.json's target_modules name");
  return static_cast<int64_t>(loaded.size());
}

void export_peft_adapter(const TransformerLM& model, const LoraConfig& lora, const std::string& dir,
                         const PeftAdapterOptions& options) {
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
    if (const auto part = adapter_tensor(name)) {
      const std::string adapted = name.substr(0, name.size() - std::string(part->ours).size());
      const auto [weight, transpose] = hf_name(family, adapted + ".weight");
      const std::string module = weight.substr(0, weight.size() - std::string(".weight").size());
      targets.insert(module);
      transposed = transposed || transpose;
      tensors[kPeftPrefix + module + part->peft] = value;  // "...q_proj" + ".lora_A.weight"
    } else {
      const auto [hf, transpose] = hf_name(family, name);
      tensors[kPeftPrefix + hf] = transpose ? value.t().contiguous() : value;
      saved_modules.insert(hf.substr(0, hf.rfind('.')));
    }
  }
  if (targets.empty())
    throw InputError("export --adapter: the model has no LoRA adapter (a run with model.adapters.lora.rank > 0 has)");
  nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"target_modules", targets},
      {"modules_to_save", saved_modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(saved_modules)},
      {"fan_in_fan_out", transposed},
      {"bias", "none"},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"base_model_name_or_path", options.base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.base_model)}};
  config.update(peft_lora_fields(lora));  // json objects keep their keys sorted: the file is written as before
  fs::create_directories(dir);
  write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomic(fs::path(dir) / "adapter_config.json", config.dump(2) + "\n");
}

int64_t apply_peft_adapter(TransformerLM& model, const std::string& dir) {
  make_lora(read_peft_adapter_config(dir, model->config()).lora)->convert(model);
  return load_peft_adapter(model, dir);
}

}  // namespace segtrain::models
