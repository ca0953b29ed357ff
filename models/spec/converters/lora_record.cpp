#include "models/spec/converters/lora_record.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/input_text.h"

namespace segtrain::models {

namespace {

using nlohmann::json;

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
