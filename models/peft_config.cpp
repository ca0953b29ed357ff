#include "models/peft_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "common/error.h"
#include "models/families/family.h"

namespace segtrain::models {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// How adapter_config.json names modules: a list matched by name or "." suffix, or a regex.
class ModuleMatcher {
 public:
  ModuleMatcher(const json& value, const std::string& at) : at_(at) {
    if (value.is_null()) return;
    if (value.is_string()) {
      pattern_ = value.get<std::string>();
      try {
        regex_ = std::regex(*pattern_);
      } catch (const std::regex_error& e) {
        throw InputError(at + ": '" + *pattern_ + "' is not a regular expression segtrain reads (" + e.what() + ")");
      }
      return;
    }
    if (!value.is_array()) throw InputError(at + ": expected a list of module names, a regular expression or null");
    for (const auto& entry : value) {
      if (!entry.is_string()) throw InputError(at + ": expected module names (strings), got " + entry.dump());
      names_.push_back(entry.get<std::string>());
    }
  }

  // The entry `module` matches ("" when none; the pattern for a regex).
  std::string match(const std::string& module) const {
    if (pattern_) return std::regex_match(module, regex_) ? *pattern_ : "";
    for (const auto& name : names_)
      if (module == name || (module.size() > name.size() && module.ends_with("." + name))) return name;
    return "";
  }

  // Each list entry once it matched something; what matched nothing is the config's error,
  // as PEFT's own ("Target modules ... not found in the base model").
  void matched(const std::string& entry) { used_.insert(entry); }
  void check_all_used(const std::string& what) const {
    for (const auto& name : names_)
      if (!used_.count(name)) throw InputError(at_ + ": '" + name + "' matches no " + what + " of the base");
    if (pattern_ && used_.empty()) throw InputError(at_ + ": '" + *pattern_ + "' matches no " + what + " of the base");
  }

 private:
  std::string at_;
  std::vector<std::string> names_;
  std::optional<std::string> pattern_;
  std::regex regex_;
  std::set<std::string> used_;
};

// Layer `layer`'s name of a table pattern ("{}" is the layer slot).
std::string at_layer(std::string pattern, int64_t layer) {
  const auto slot = pattern.find("{}");
  if (slot != std::string::npos) pattern.replace(slot, 2, std::to_string(layer));
  return pattern;
}

std::string without_last(const std::string& name) { return name.substr(0, name.rfind('.')); }

// The group of train.trainable that holds our parameter `ours`; "" for a weight that only an
// adapter trains.
std::string trainable_group(const std::string& ours) {
  if (ours.starts_with("wte.") || ours.starts_with("wpe.")) return "embeddings";
  if (ours.starts_with("lm_head.")) return "head";
  const std::string module = without_last(ours);
  const std::string last = module.substr(module.rfind('.') + 1);
  if (last.find("ln") != std::string::npos || last.find("norm") != std::string::npos) return "norms";
  return "";
}

const json& field(const json& config, const char* key) {
  static const json null;
  return config.contains(key) ? config.at(key) : null;
}

// A key that must hold PEFT's default for segtrain to continue the adapter as it is.
void expect_default(const json& config, const char* key, const json& fallback, const std::string& file,
                    const std::string& why) {
  const json& value = field(config, key);
  if (value.is_null() || value == fallback || (value.is_object() && value.empty()) || (value.is_array() && value.empty()))
    return;
  throw InputError(file + ": " + key + ": " + value.dump() + " is not supported: " + why);
}

// r, lora_alpha, lora_dropout and base_model_name_or_path; refused: what PEFT's LoRA has and segtrain's has not.
void read_numbers(const json& config, const std::string& file, PeftAdapterConfig& out) {
  if (field(config, "peft_type") != "LORA")
    throw InputError(file + ": peft_type: " + field(config, "peft_type").dump() + "; segtrain continues LORA adapters");
  const json& r = field(config, "r");
  if (!r.is_number_integer() || r.get<int64_t>() < 1) throw InputError(file + ": r: expected an integer >= 1, got " + r.dump());
  out.lora.rank = r.get<int64_t>();
  const json& alpha = field(config, "lora_alpha");
  if (!alpha.is_number() || alpha.get<double>() <= 0)
    throw InputError(file + ": lora_alpha: expected a number > 0, got " + alpha.dump());
  out.lora.alpha = alpha.get<double>();
  const json& dropout = field(config, "lora_dropout");
  if (!dropout.is_null() && (!dropout.is_number() || dropout.get<double>() < 0 || dropout.get<double>() >= 1))
    throw InputError(file + ": lora_dropout: expected a number in [0, 1), got " + dropout.dump());
  out.lora.dropout = dropout.is_null() ? 0.0 : dropout.get<double>();
  expect_default(config, "bias", "none", file, "segtrain's adapters train no bias");
  expect_default(config, "use_dora", false, file, "segtrain's adapters are LoRA's (no DoRA)");
  expect_default(config, "use_rslora", false, file, "segtrain scales adapters by alpha / r (no rsLoRA)");
  expect_default(config, "lora_bias", false, file, "segtrain's adapters train no bias");
  expect_default(config, "rank_pattern", json::object(), file, "every adapter of segtrain's has the one rank r");
  expect_default(config, "alpha_pattern", json::object(), file, "every adapter of segtrain's has the one lora_alpha");
  expect_default(config, "layers_to_transform", nullptr, file, "segtrain adapts every layer");
  expect_default(config, "target_parameters", nullptr, file, "segtrain adapts modules (target_modules)");
  if (field(config, "base_model_name_or_path").is_string())
    out.base_model = field(config, "base_model_name_or_path").get<std::string>();
}

// The base's HF names a family's table gives, with its prefix where the row has it.
struct HfNames {
  const Family& family;
  const ModelConfig& base;
  std::string full(bool prefixed, const std::string& hf) const { return (prefixed ? family.names().prefix : "") + hf; }
};

// target_modules -> segtrain's targets: each on every layer or on none (and fan_in_fan_out as the family holds them).
std::vector<std::string> read_targets(const json& config, const std::string& file, const HfNames& names) {
  if (field(config, "target_modules").is_null()) throw InputError(file + ": target_modules: required");
  ModuleMatcher targets(field(config, "target_modules"), file + ": target_modules");
  const HfNameTable& table = names.family.names();
  const BlockKind block = arch_layout(names.base.arch).block;
  std::vector<std::string> out;
  bool transposed = false;
  for (const auto& target : kLoraTargets) {
    const auto module = lora_module(block, target);
    if (!module) continue;
    const std::string ours = "blocks.{}." + *module + ".weight";
    const auto row = std::find_if(table.tensors.begin(), table.tensors.end(), [&](const auto& t) { return t.ours == ours; });
    if (row == table.tensors.end()) {  // a projection transformers fuses with others (Phi-3's qkv_proj)
      for (const auto& fused : table.fused)
        if (std::find(fused.parts.begin(), fused.parts.end(), ours) != fused.parts.end())
          if (const std::string entry = targets.match(without_last(names.full(fused.prefixed, at_layer(fused.hf, 0))));
              !entry.empty())
            throw InputError(file + ": target_modules: '" + entry + "' adapts " + names.family.model_type() +
                             "'s fused " + without_last(fused.hf) + " as one projection; segtrain adapts its parts apart");
      continue;
    }
    int64_t layers = 0;
    for (int64_t layer = 0; layer < names.base.n_layers; ++layer)
      if (const std::string entry = targets.match(without_last(names.full(row->prefixed, at_layer(row->hf, layer))));
          !entry.empty()) {
        targets.matched(entry);
        ++layers;
      }
    if (layers == 0) continue;
    if (layers != names.base.n_layers)
      throw InputError(file + ": target_modules: adapt " + without_last(row->hf) + " on " + std::to_string(layers) +
                       " of the base's " + std::to_string(names.base.n_layers) + " layers; segtrain adapts every layer");
    out.push_back(target);
    transposed = transposed || row->transpose;
  }
  targets.check_all_used("projection segtrain adapts (" +
                         std::string(block == BlockKind::llama ? "q, k, v, o, gate, up, down" : "qkv, o, up, down") + ")");
  const json& fan_in_fan_out = field(config, "fan_in_fan_out");
  if (!fan_in_fan_out.is_null() && !fan_in_fan_out.is_boolean())
    throw InputError(file + ": fan_in_fan_out: expected true or false, got " + fan_in_fan_out.dump());
  if (!fan_in_fan_out.is_null() && fan_in_fan_out.get<bool>() != transposed)
    throw InputError(file + ": fan_in_fan_out: " + fan_in_fan_out.dump() + ", but " + names.family.model_type() +
                     "'s adapted projections hold their weights " +
                     (transposed ? "transposed (Conv1D): true" : "as Linear: false"));
  return out;
}

// modules_to_save -> the groups of train.trainable they hold, after "adapters".
std::vector<std::string> read_saved_groups(const json& config, const std::string& file, const HfNames& names) {
  ModuleMatcher saved(field(config, "modules_to_save"), file + ": modules_to_save");
  std::set<std::string> groups;
  for (const auto& row : names.family.names().tensors) {
    const bool per_layer = row.hf.find("{}") != std::string::npos;
    for (int64_t layer = 0; layer < (per_layer ? names.base.n_layers : 1); ++layer) {
      const std::string module = without_last(names.full(row.prefixed, at_layer(row.hf, layer)));
      const std::string entry = saved.match(module);
      if (entry.empty()) continue;
      saved.matched(entry);
      const std::string group = trainable_group(row.ours);
      if (group.empty())
        throw InputError(file + ": modules_to_save: '" + entry + "' holds " + module +
                         ", which segtrain does not train besides adapters (norms, embeddings and the head do)");
      if (group == "embeddings" && names.base.tie_embeddings)
        throw InputError(file + ": modules_to_save: '" + entry + "' holds the token table, which the base's head is "
                         "tied to: PEFT trains a copy of it under the untied head, which segtrain's tied model cannot hold");
      groups.insert(group);
    }
  }
  saved.check_all_used("module");
  std::vector<std::string> out = {"adapters"};
  for (const auto& group : kTrainableGroups)
    if (groups.count(group)) out.push_back(group);
  return out;
}

}  // namespace

PeftAdapterConfig read_peft_adapter_config(const std::string& dir, const ModelConfig& base) {
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  std::ifstream in(file);
  if (!in) throw InputError(file + ": cannot be read; expected a PEFT adapter folder (adapter_config.json, adapter_model.safetensors)");
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) throw InputError(file + ": not a JSON object");
  PeftAdapterConfig out;
  read_numbers(config, file, out);
  const HfNames names{family_for_export(base), base};
  out.lora.targets = read_targets(config, file, names);
  out.trainable = read_saved_groups(config, file, names);
  return out;
}

std::string find_peft_base(const std::string& adapter_dir, const std::string& base_model) {
  if (base_model.empty()) return "";
  for (const fs::path& candidate : {fs::path(base_model), fs::path(adapter_dir) / base_model})
    if (fs::is_regular_file(candidate / "config.json")) return candidate.string();
  // A model id "org/name" in the hub cache: models--org--name/snapshots/<refs/main>.
  if (base_model.find("..") != std::string::npos || base_model.starts_with("/")) return "";
  std::vector<fs::path> caches;
  if (const char* cache = std::getenv("HF_HUB_CACHE"); cache && *cache) caches.emplace_back(cache);
  if (const char* home = std::getenv("HF_HOME"); home && *home) caches.push_back(fs::path(home) / "hub");
  if (const char* home = std::getenv("HOME"); home && *home) caches.push_back(fs::path(home) / ".cache/huggingface/hub");
  std::string folder = "models--" + base_model;
  for (size_t slash = folder.find('/'); slash != std::string::npos; slash = folder.find('/')) folder.replace(slash, 1, "--");
  for (const auto& cache : caches) {
    const fs::path model = cache / folder;
    std::ifstream ref(model / "refs" / "main");
    std::string commit;
    if (!(ref >> commit) || commit.find('/') != std::string::npos) continue;
    if (fs::is_regular_file(model / "snapshots" / commit / "config.json")) return (model / "snapshots" / commit).string();
  }
  return "";
}

}  // namespace segtrain::models
