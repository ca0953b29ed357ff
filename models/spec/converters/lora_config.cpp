#include "models/spec/converters/lora_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/input_text.h"
#include "common/numbers.h"
#include "models/spec/auto_values.h"

namespace segtrain::models {

namespace {

using nlohmann::json;

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

bool listed(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

// A size the arithmetic below may multiply without overflowing: positive and below 2^24 (a
// projection of 16M features is past any model's; Llama-3-405B's widest has 53,248).
bool sane(int64_t size) { return size > 0 && size < (int64_t{1} << 24); }
bool sane(const std::optional<int64_t>& size) { return !size || sane(*size); }

bool string_list(const json& entry, const char* key) {
  return entry.contains(key) && entry[key].is_array() &&
         std::all_of(entry[key].begin(), entry[key].end(), [](const json& v) { return v.is_string(); });
}

const json& field(const json& config, const char* key) {
  static const json null;
  return config.contains(key) ? config.at(key) : null;
}

std::string shown(const json& value) {
  return shown_input(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace

std::string human_count(double count) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int unit = 0;
  while (std::fabs(count) >= 1000 && unit < 4) count /= 1000, ++unit;
  char text[64];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f%s" : "%.1f%s", count, units[unit]);
  return text;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 6) bytes /= 1024, ++unit;
  char text[64];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

std::vector<LoraProjection> lora_projections(const LoraConfig& lora, const ModelConfig& model) {
  if (!sane(model.d_model) || !sane(model.n_heads) || !sane(model.n_layers) || !sane(model.d_ff) ||
      !sane(model.n_kv_heads) || !sane(model.head_dim) || !sane(head_dim_of(model)))
    return {};
  const int64_t d = model.d_model, ff = d_ff_of(model), heads = model.n_heads * head_dim_of(model),
                kv = n_kv_heads_of(model) * head_dim_of(model);
  if (!sane(ff) || !sane(heads) || !sane(kv)) return {};
  const BlockKind block = arch_layout(model.arch).block;
  std::vector<LoraProjection> out;
  for (const auto& target : lora.targets) {
    if (!lora_module(block, target)) return {};
    if (block == BlockKind::llama) {
      if (target == "q") out.push_back({target, d, heads});
      if (target == "k" || target == "v") out.push_back({target, d, kv});
      if (target == "o") out.push_back({target, heads, d});
    } else {
      if (target == "qkv") out.push_back({target, d, 3 * d});
      if (target == "o") out.push_back({target, d, d});
    }
    if (target == "gate" || target == "up") out.push_back({target, d, ff});
    if (target == "down") out.push_back({target, ff, d});
  }
  return out;
}

double lora_parameters(const LoraConfig& lora, const ModelConfig& model) {
  double sides = 0;  // in + out of every adapted projection of a block
  for (const auto& p : lora_projections(lora, model)) sides += static_cast<double>(p.in + p.out);
  return static_cast<double>(lora.rank) * sides * static_cast<double>(model.n_layers);
}

std::vector<ConfigProblem> lora_size_problems(const LoraConfig& lora, const ModelConfig& model) {
  const auto projections = lora_projections(lora, model);
  if (lora.rank <= 0 || projections.empty()) return {};
  // Every size is below 2^26 (3 x d_model for qkv), so no sum or product below overflows; rank x (in + out)
  // summed is at most the weights summed exactly when rank is at most their quotient.
  int64_t sides = 0, weights = 0;
  for (const auto& p : projections) {
    sides += p.in + p.out;
    weights += p.in * p.out;
  }
  const int64_t largest = weights / sides;
  if (lora.rank <= largest) return {};
  const double parameters = lora_parameters(lora, model);
  std::string targets;
  for (const auto& p : projections) targets += (targets.empty() ? "" : ", ") + p.target;
  return {{"model.adapters.lora.rank",
           std::to_string(lora.rank) + " would make the adapters " + human_bytes(parameters * 4) + " in fp32 (" +
               human_count(parameters) + " parameters on " + targets + " of " + std::to_string(model.n_layers) +
               " layers, before gradients and AdamW's state), larger than the projections they adapt (" +
               human_count(static_cast<double>(weights) * static_cast<double>(model.n_layers)) +
               " parameters): at most " + std::to_string(largest) +
               " here; past that, training the projections themselves costs less and learns any update"}};
}

std::optional<std::string> lora_module(BlockKind block, const std::string& target) {
  if (block == BlockKind::llama) {
    if (target == "qkv") return std::nullopt;
    if (listed({"q", "k", "v", "o", "gate", "up", "down"}, target)) return target + "_proj";
    return std::nullopt;
  }
  if (target == "qkv") return "qkv";
  if (target == "o") return "proj";
  if (target == "up") return "fc";
  if (target == "down") return "fc_out";
  return std::nullopt;
}

std::string trainable_group(const std::string& name) {
  if (name.starts_with("wte.") || name.starts_with("wpe.")) return "embeddings";
  if (name.starts_with("lm_head.")) return "head";
  const std::string module = name.substr(0, name.rfind('.'));
  const std::string last = module.substr(module.rfind('.') + 1);
  if (last.find("ln") != std::string::npos || last.find("norm") != std::string::npos) return "norms";
  return "";
}

bool trains_with_adapters(const std::vector<std::string>& trainable, const std::string& name, bool tied_head) {
  const std::string group = trainable_group(name);
  if (!group.empty() && listed(trainable, group)) return true;
  return tied_head && name.starts_with("wte.") && listed(trainable, "head");  // a tied head is the token table
}

std::vector<ConfigProblem> lora_problems(const LoraConfig& lora, Arch arch, bool activation_checkpointing) {
  const auto& trainable = lora.trainable;
  std::vector<ConfigProblem> out;
  if (lora.rank < 0) out.push_back({"model.adapters.lora.rank", "must be >= 0 (0: no adapters), got " + std::to_string(lora.rank)});
  for (const auto& group : trainable)
    if (!listed(kTrainableGroups, group))
      out.push_back({"train.trainable", "unknown group '" + group + "' (expected some of " + joined(kTrainableGroups) + ")"});
  if (lora.rank <= 0) {
    if (trainable != std::vector<std::string>{"adapters"})
      out.push_back({"train.trainable", "applies to a LoRA run (model.adapters.lora.rank > 0), whose base is frozen; "
                                        "without adapters every weight trains (train.freeze freezes some)"});
    return out;
  }
  if (!listed(trainable, "adapters"))
    out.push_back({"train.trainable", "must list adapters: a LoRA run trains its adapters (with norms, embeddings or "
                                      "head besides, as LongLoRA's LoRA+)"});
  if (!(lora.alpha > 0) || !std::isfinite(lora.alpha))
    out.push_back({"model.adapters.lora.alpha", "must be a positive number, got " + format_double(lora.alpha)});
  if (!(lora.dropout >= 0 && lora.dropout < 1))
    out.push_back({"model.adapters.lora.dropout", "must be in [0, 1), got " + format_double(lora.dropout)});
  else if (lora.dropout > 0 && activation_checkpointing)
    out.push_back({"model.adapters.lora.dropout", "must be 0 with model.activation_checkpointing: a recomputed block "
                                                  "would draw another dropout mask than its forward did"});
  if (lora.targets.empty()) out.push_back({"model.adapters.lora.targets", "must name at least one projection"});
  const BlockKind block = arch_layout(arch).block;
  std::set<std::string> seen;
  for (const auto& target : lora.targets) {
    if (!seen.insert(target).second) {
      out.push_back({"model.adapters.lora.targets", "names " + target + " twice"});
    } else if (!listed(kLoraTargets, target)) {
      out.push_back({"model.adapters.lora.targets", "unknown projection '" + target + "' (expected some of " +
                                                        joined(kLoraTargets) + ")"});
    } else if (!lora_module(block, target)) {
      std::vector<std::string> fits;
      for (const auto& t : kLoraTargets)
        if (lora_module(block, t)) fits.push_back(t);
      out.push_back({"model.adapters.lora.targets",
                     target + " is no projection of model.arch " + enum_name(kArchs, arch) + "'s block (it has " +
                         joined(fits) + (block == BlockKind::megatron ? "; q, k and v are one projection, qkv" : "") +
                         ")"});
    }
  }
  return out;
}

// The records.

json lora_settings_json(const LoraConfig& lora) {
  return {{"rank", lora.rank},       {"alpha", lora.alpha},       {"dropout", lora.dropout},
          {"targets", lora.targets}, {"use_dora", lora.use_dora}};
}

json lora_record(const LoraConfig& lora) {
  json record = lora_settings_json(lora);
  record["name"] = "lora";
  record["trainable"] = lora.trainable;
  if (!lora.use_dora) record.erase("use_dora");
  return record;
}

LoraConfig lora_from_record(const json& entry, const std::string& source) {
  const bool fits = entry.contains("rank") && entry["rank"].is_number_integer() && entry.contains("alpha") &&
                    entry["alpha"].is_number() && entry.contains("dropout") && entry["dropout"].is_number() &&
                    string_list(entry, "targets") && string_list(entry, "trainable") &&
                    (!entry.contains("use_dora") || entry["use_dora"].is_boolean());
  if (!fits)
    throw InputError(source + ": the lora converter needs \"rank\" (an integer), \"alpha\", \"dropout\" (numbers), "
                     "\"targets\" and \"trainable\" (lists of strings), and \"use_dora\" a boolean where it is given");
  LoraConfig lora;
  lora.rank = entry["rank"].get<int64_t>();
  lora.alpha = entry["alpha"].get<double>();
  lora.dropout = entry["dropout"].get<double>();
  lora.targets = entry["targets"].get<std::vector<std::string>>();
  lora.trainable = entry["trainable"].get<std::vector<std::string>>();
  lora.use_dora = entry.contains("use_dora") && entry["use_dora"].get<bool>();
  return lora;
}

json peft_lora_fields(const LoraConfig& lora) {
  return {{"r", lora.rank},   {"lora_alpha", lora.alpha}, {"lora_dropout", lora.dropout},
          {"use_rslora", false}, {"use_dora", lora.use_dora}};
}

LoraConfig lora_from_peft_fields(const json& config, const std::string& file) {
  LoraConfig lora;
  const json& r = field(config, "r");
  if (!r.is_number_integer() || r.get<int64_t>() < 1) throw InputError(file + ": r: expected an integer >= 1, got " + shown(r));
  lora.rank = r.get<int64_t>();
  const json& alpha = field(config, "lora_alpha");
  if (!alpha.is_number() || !(alpha.get<double>() > 0) || !std::isfinite(alpha.get<double>()))
    throw InputError(file + ": lora_alpha: expected a finite number > 0, got " + shown(alpha));
  lora.alpha = alpha.get<double>();
  const json& dropout = field(config, "lora_dropout");
  if (!dropout.is_null() && (!dropout.is_number() || dropout.get<double>() < 0 || dropout.get<double>() >= 1))
    throw InputError(file + ": lora_dropout: expected a number in [0, 1), got " + shown(dropout));
  lora.dropout = dropout.is_null() ? 0.0 : dropout.get<double>();
  const json& dora = field(config, "use_dora");
  if (!dora.is_null() && !dora.is_boolean()) throw InputError(file + ": use_dora: expected true or false, got " + shown(dora));
  lora.use_dora = dora.is_boolean() && dora.get<bool>();
  return lora;
}

}  // namespace segtrain::models
