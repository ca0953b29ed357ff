#include "trainer/config/peft_init.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/numbers.h"
#include "models/spec/converters/lora_config.h"
#include "models/spec/families/hf_config.h"
#include "models/spec/families/peft_config.h"
#include "trainer/config/model_ref.h"

namespace segtrain::trainer {

namespace fs = std::filesystem;

namespace {

// A setting's value as the run config writes it: 4, 16, 0.05, true, [q, v].
std::string setting_text(const nlohmann::json& value) {
  if (value.is_number_float()) return format_double(value.get<double>());
  if (!value.is_array()) return value.dump();
  std::string items;
  for (const auto& item : value) items += (items.empty() ? "" : ", ") + item.get<std::string>();
  return "[" + items + "]";
}

}  // namespace

std::vector<std::string> adopt_peft_adapter(LoadedConfig& loaded) {
  const auto ref = parse_model_ref(loaded.config.model.init);
  if (!ref || ref->kind != ModelRef::Kind::peft || ref->dir.empty() ||
      !fs::is_regular_file(fs::path(ref->adapter) / "adapter_config.json"))
    return {};  // not a PEFT adapter, or the validator's to refuse
  models::PeftAdapterConfig adapter;
  try {
    adapter = models::read_peft_adapter_config(ref->adapter, models::read_hf_config(ref->dir));
  } catch (const InputError& e) {
    return {loaded.locate("model.init") + ": " + e.what()};
  }
  const std::string origin = (fs::path(ref->adapter) / "adapter_config.json").string();
  std::vector<std::string> problems;
  auto& lora = loaded.config.model.adapters.lora;
  // Each setting: the adapter's where the config leaves it out; where it is given, the adapter's
  // too when its weights fix it (kLoraSettings, models/spec/converters/lora_config.h).
  const nlohmann::json given = models::lora_settings_json(lora), adapters = models::lora_settings_json(adapter.lora);
  nlohmann::json merged = models::lora_record(lora);
  for (const auto& setting : models::kLoraSettings) {
    const std::string key = models::lora_config_key(setting);
    if (!loaded.origins.count(key)) {
      merged[setting.record] = adapters.at(setting.record);
      loaded.origins[key] = origin;
    } else if (setting.fixed_by_weights && given.at(setting.record) != adapters.at(setting.record)) {
      problems.push_back(loaded.locate(key) + ": the adapter model.init continues (" + ref->adapter + ") has " +
                         setting.record + " " + setting_text(adapters.at(setting.record)) + " (PEFT's " +
                         setting.peft + "); leave the key out to take it");
    }
  }
  lora = models::lora_from_record(merged, origin);
  auto& trainable = lora.trainable;
  if (!loaded.origins.count("train.trainable")) {
    trainable = adapter.lora.trainable;
    loaded.origins["train.trainable"] = origin;
  } else {
    for (const auto& group : adapter.lora.trainable)
      if (std::find(trainable.begin(), trainable.end(), group) == trainable.end())
        problems.push_back(loaded.locate("train.trainable") + ": the adapter model.init continues (" + ref->adapter +
                           ") trained " + group + " (modules_to_save), which must train on: a checkpoint keeps only "
                           "what trains");
  }
  return problems;
}

}  // namespace segtrain::trainer
