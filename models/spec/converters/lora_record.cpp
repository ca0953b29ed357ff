#include "models/spec/converters/lora_record.h"

#include <algorithm>

#include "common/error.h"

namespace segtrain::models {

namespace {

using nlohmann::json;

bool string_list(const json& entry, const char* key) {
  return entry.contains(key) && entry[key].is_array() &&
         std::all_of(entry[key].begin(), entry[key].end(), [](const json& v) { return v.is_string(); });
}

}  // namespace

json lora_record(const LoraConfig& lora) {
  json record = {{"name", "lora"},           {"rank", lora.rank},       {"alpha", lora.alpha},
                 {"dropout", lora.dropout}, {"targets", lora.targets}, {"trainable", lora.trainable}};
  if (lora.use_dora) record["use_dora"] = true;  // absent: LoRA, as every record before DoRA reads
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

}  // namespace segtrain::models
