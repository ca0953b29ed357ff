#include "trainer/config/peft_init.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/numbers.h"
#include "common/strings.h"
#include "models/spec/families/hf_config.h"
#include "models/spec/families/peft_config.h"
#include "trainer/config/model_ref.h"

namespace segtrain::trainer {

namespace fs = std::filesystem;

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
  // Each key: the adapter's where the config leaves it out; where it is given, the adapter's too
  // (`must_agree`) or the config's (dropout: how it trains on, not what its weights are).
  auto adopt = [&](const std::string& key, auto& value, const auto& adapters, const std::string& shown,
                   bool must_agree) {
    if (!loaded.origins.count(key)) {
      value = adapters;
      loaded.origins[key] = origin;
    } else if (must_agree && value != adapters) {
      problems.push_back(loaded.locate(key) + ": the adapter model.init continues (" + ref->adapter + ") has " +
                         shown + "; leave the key out to take it");
    }
  };
  adopt("model.adapters.lora.rank", lora.rank, adapter.lora.rank, "r " + std::to_string(adapter.lora.rank), true);
  adopt("model.adapters.lora.alpha", lora.alpha, adapter.lora.alpha, "lora_alpha " + format_double(adapter.lora.alpha), true);
  adopt("model.adapters.lora.targets", lora.targets, adapter.lora.targets,
        "targets [" + join(adapter.lora.targets, ", ") + "]", true);
  adopt("model.adapters.lora.dropout", lora.dropout, adapter.lora.dropout, "", false);
  adopt("model.adapters.lora.use_dora", lora.use_dora, adapter.lora.use_dora,
        std::string("use_dora ") + (adapter.lora.use_dora ? "true" : "false"), true);
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
